package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
)

// ConsumerSpec declares the durable pull consumer of one (task type, priority)
// pair. Every field but TaskType has a usable zero value.
type ConsumerSpec struct {
	// TaskType is the task type, for example "payments.charge". Required.
	TaskType string
	// Priority selects the work subject. Default streams.PriorityNormal.
	Priority streams.Priority
	// MaxDeliver is the number of deliveries (attempts) before the server
	// gives up on a task and emits a max-deliveries advisory. Default 25.
	MaxDeliver int
	// AckWait is how long a delivered task may go without an ack or a
	// heartbeat before it is redelivered. Default 30 s.
	AckWait time.Duration
	// MaxAckPending caps the tasks of this pair in flight across all workers
	// of the cluster. Default 1000.
	MaxAckPending int
	// Replicas is the consumer's replica count; 0 inherits the stream's.
	Replicas int
}

// Defaults used by [ConsumerSpec] fields left at their zero value.
const (
	DefaultMaxDeliver    = 25
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 1000
)

// Metadata keys set on every consumer jetflow creates.
const (
	MetaTaskType = "jetflow.type"
	MetaPriority = "jetflow.priority"
)

// ConsumerConfig returns the JetStream configuration of spec under names.
func ConsumerConfig(names streams.Names, spec ConsumerSpec) (jetstream.ConsumerConfig, error) {
	if err := streams.ValidateTaskType(spec.TaskType); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if !spec.Priority.Valid() {
		return jetstream.ConsumerConfig{}, fmt.Errorf("%w: %d", streams.ErrInvalidPriority, uint8(spec.Priority))
	}
	if spec.MaxDeliver <= 0 {
		spec.MaxDeliver = DefaultMaxDeliver
	}
	if spec.AckWait <= 0 {
		spec.AckWait = DefaultAckWait
	}
	if spec.MaxAckPending <= 0 {
		spec.MaxAckPending = DefaultMaxAckPending
	}
	name := names.ConsumerName(spec.TaskType, spec.Priority)
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   fmt.Sprintf("jetflow %s tasks of type %s", spec.Priority, spec.TaskType),
		FilterSubject: names.TaskSubject(spec.Priority, spec.TaskType),
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		MaxDeliver:    spec.MaxDeliver,
		AckWait:       spec.AckWait,
		MaxAckPending: spec.MaxAckPending,
		MaxWaiting:    512,
		Replicas:      spec.Replicas,
		Metadata: map[string]string{
			MetaTaskType: spec.TaskType,
			MetaPriority: spec.Priority.String(),
		},
	}, nil
}

// EnsureConsumer creates the consumer of spec on the task stream, or updates
// it when its limits changed. A pause set on the consumer (for example by an
// open circuit breaker) is kept. It refuses, with an error wrapping
// streams.ErrDrift, a consumer of the same name whose filter subject belongs to
// another task type.
//
// Like streams.Ensure, it retries errors of a cluster that is still forming until
// ctx ends (at most streamdefs.RetryFor without a deadline), and each attempt
// gets its own deadline of [RequestTimeout] within ctx's: a request nobody
// answers (a consumer leader election) is tried again rather than waited
// on until ctx ends.
func EnsureConsumer(ctx context.Context, js jetstream.JetStream, names streams.Names, spec ConsumerSpec) (jetstream.Consumer, error) {
	return ensureConsumerWithin(ctx, js, names, spec, RequestTimeout)
}

// ensureConsumerWithin is EnsureConsumer with attempts of at most per.
func ensureConsumerWithin(ctx context.Context, js jetstream.JetStream, names streams.Names, spec ConsumerSpec, per time.Duration) (jetstream.Consumer, error) {
	var c jetstream.Consumer
	err := retryRequests(ctx, per, func(ctx context.Context) error {
		var err error
		c, err = ensureConsumer(ctx, js, names, spec)
		return err
	})
	return c, err
}

func ensureConsumer(ctx context.Context, js jetstream.JetStream, names streams.Names, spec ConsumerSpec) (jetstream.Consumer, error) {
	want, err := ConsumerConfig(names, spec)
	if err != nil {
		return nil, err
	}
	stream := names.TaskStream()
	c, err := js.Consumer(ctx, stream, want.Durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		c, err = js.CreateOrUpdateConsumer(ctx, stream, want)
		if err != nil {
			return nil, consumerErr(stream, want.Durable, err)
		}
		return c, nil
	case err != nil:
		return nil, consumerErr(stream, want.Durable, err)
	}
	have := c.CachedInfo().Config
	if have.FilterSubject != want.FilterSubject {
		return nil, fmt.Errorf("%w: consumer %s on %s filters %q, want %q: task types %q and another type map to the same consumer name; rename one",
			streams.ErrDrift, want.Durable, stream, have.FilterSubject, want.FilterSubject, spec.TaskType)
	}
	if have.MaxDeliver == want.MaxDeliver && have.AckWait == want.AckWait &&
		have.MaxAckPending == want.MaxAckPending && have.AckPolicy == want.AckPolicy &&
		(want.Replicas == 0 || have.Replicas == want.Replicas) {
		return c, nil
	}
	want.PauseUntil = have.PauseUntil
	c, err = js.UpdateConsumer(ctx, stream, want)
	if err != nil {
		return nil, consumerErr(stream, want.Durable, err)
	}
	return c, nil
}

func consumerErr(stream, name string, err error) error {
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("streams: consumer %s: stream %s does not exist (call streams.Ensure first): %w", name, stream, err)
	}
	return fmt.Errorf("streams: ensure consumer %s on %s: %w", name, stream, err)
}
