package streams

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/nats-io/nats.go/jetstream"
)

// Workflow events (package workflow's WaitEvent): an event is a message on
// "<prefix>.event.<key>" in the event stream ([Names.EventStream]), kept
// for streamdefs.DefaultEventRetention, the last one per key; a run waiting for key
// K is indexed by a message on "<prefix>.waiting.<K>.<run>" in the wait
// stream ([Names.WaitStream]). [EnsureEvents] creates both. [Ensure] does
// not: workers that run workflows with event waits create them at start.

// EventStream returns the name of the stream of workflow events, for
// example "JETFLOW_EVENTS".
func (n Names) EventStream() string { return n.upper + "_EVENTS" }

// EventSubject returns the subject of the events of key:
// "<prefix>.event.<key>". It does not validate its argument.
func (n Names) EventSubject(key string) string { return n.prefix + ".event." + key }

// ParseEventSubject returns the key of an event subject
// ([Names.EventSubject]), validated as an event key.
func (n Names) ParseEventSubject(subject string) (string, error) {
	key, ok := strings.CutPrefix(subject, n.prefix+".event.")
	if !ok {
		return "", fmt.Errorf("%w: %q does not start with %q", ErrInvalidSubject, subject, n.prefix+".event.")
	}
	return key, streamdefs.ValidateEventKey(key)
}

// EventConsumer returns the name of the durable consumer of the event
// stream that workers share to resume waiting runs: "router".
func (n Names) EventConsumer() string { return "router" }

// WaitStream returns the name of the stream indexing the runs that wait for
// an event, for example "JETFLOW_WAITS".
func (n Names) WaitStream() string { return n.upper + "_WAITS" }

// WaitSubject returns the subject recording that run waits for the event
// key: "<prefix>.waiting.<key>.<run>". It does not validate its arguments.
func (n Names) WaitSubject(key, run string) string { return n.prefix + ".waiting." + key + "." + run }

// eventStreamConfigs returns the event stream and the wait stream of c.
//
// The event stream keeps the last event of each key for
// streamdefs.DefaultEventRetention, refuses payloads over streamdefs.MaxEventBytes and
// drops a second event with the same Nats-Msg-Id within c's duplicate
// window. The wait stream keeps one entry per waiting run and key; an
// entry expires by message TTL after its wait's deadline, or is replaced by
// an empty one when the run resumes.
func eventStreamConfigs(c Config) ([]jetstream.StreamConfig, error) {
	c, n, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	events := jetstream.StreamConfig{
		Name:              n.EventStream(),
		Description:       "jetflow workflow events: the last event of each key, for the runs that wait or will wait for it",
		Subjects:          []string{n.EventSubject(">")},
		Retention:         jetstream.LimitsPolicy,
		MaxAge:            streamdefs.DefaultEventRetention,
		MaxMsgsPerSubject: 1,
		MaxMsgSize:        streamdefs.MaxEventBytes + 8<<10,
		Discard:           jetstream.DiscardOld,
		Storage:           c.Storage,
		Replicas:          c.Replicas,
		Duplicates:        c.DuplicateWindow,
		AllowDirect:       true,
		AllowRollup:       false,
	}
	waits := jetstream.StreamConfig{
		Name:              n.WaitStream(),
		Description:       "jetflow workflow waits: one entry per run waiting for an event key",
		Subjects:          []string{n.prefix + ".waiting.>"},
		Retention:         jetstream.LimitsPolicy,
		MaxMsgsPerSubject: 1,
		MaxMsgSize:        4 << 10,
		Discard:           jetstream.DiscardOld,
		Storage:           c.Storage,
		Replicas:          c.Replicas,
		AllowMsgTTL:       true,
		AllowDirect:       true,
		AllowRollup:       false,
	}
	return []jetstream.StreamConfig{events, waits}, nil
}

// eventConsumerConfig returns the configuration of [Names.EventConsumer]:
// every event once, acknowledged by the worker that resumed its runs.
func eventConsumerConfig(n Names) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       n.EventConsumer(),
		Description:   "jetflow: resumes the workflow runs waiting for each event",
		FilterSubject: n.EventSubject(">"),
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
	}
}

// EnsureEvents creates the event stream, the wait stream and the event
// consumer of c where they do not exist, and leaves existing ones as they
// are. It is idempotent and safe to call from every worker at start.
func EnsureEvents(ctx context.Context, js jetstream.JetStream, c Config) error {
	cfgs, err := eventStreamConfigs(c)
	if err != nil {
		return err
	}
	_, n, _ := c.withDefaults()
	for _, cfg := range cfgs {
		if _, err := js.Stream(ctx, cfg.Name); err == nil {
			continue
		} else if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("streams: look up %s: %w", cfg.Name, err)
		}
		if _, err := js.CreateStream(ctx, cfg); err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return fmt.Errorf("streams: create %s: %w", cfg.Name, err)
		}
	}
	if _, err := js.Consumer(ctx, n.EventStream(), n.EventConsumer()); err == nil {
		return nil
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		return fmt.Errorf("streams: look up %s/%s: %w", n.EventStream(), n.EventConsumer(), err)
	}
	if _, err := js.CreateConsumer(ctx, n.EventStream(), eventConsumerConfig(n)); err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
		return fmt.Errorf("streams: create %s/%s: %w", n.EventStream(), n.EventConsumer(), err)
	}
	return nil
}
