package topology

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// MetaPartition is the consumer metadata key holding "<partition>/<partitions>"
// on ordered partition consumers.
const MetaPartition = "jetflow.partition"

// ValidatePartitions checks that partitions is between 1 and
// streamdefs.OrderedSlots and divides it.
func ValidatePartitions(partitions int) error {
	if partitions < 1 || partitions > streamdefs.OrderedSlots || streamdefs.OrderedSlots%partitions != 0 {
		return fmt.Errorf("streams: %d ordered partitions: want a divisor of %d (1, 2, 4, … %d)", partitions, streamdefs.OrderedSlots, streamdefs.OrderedSlots)
	}
	return nil
}

// OrderedConsumerSpec declares one partition consumer of an ordered task
// type.
type OrderedConsumerSpec struct {
	// TaskType is the ordered task type. Required.
	TaskType string
	// Partitions is the type's partition count, a divisor of
	// streamdefs.OrderedSlots. Required.
	Partitions int
	// Partition is this consumer's partition, 0 to Partitions-1.
	Partition int
	// MaxDeliver is the number of deliveries before the server gives up on
	// a task. Default 25; -1 means unlimited.
	MaxDeliver int
	// AckWait is how long a delivered task may go without an ack or a
	// heartbeat before it is redelivered. Default 30 s.
	AckWait time.Duration
	// Replicas is the consumer's replica count; 0 inherits the stream's.
	Replicas int
	// Legacy adds a filter per slot subject of the partition in the layout
	// of earlier versions, so that their tasks run in stream order with the
	// new ones: for a deployment created by one of them
	// (streams.Layout.OldOrderedSubjects). Off, the consumer has one
	// filter: every filter of every consumer costs the server on each ack
	// (decision 051).
	Legacy bool
}

// orderedConsumerConfig returns the JetStream configuration of spec under
// names: MaxAckPending 1, the bits filter of the partition and, with
// Legacy, one filter subject per legacy slot subject of the partition.
func orderedConsumerConfig(names streams.Names, spec OrderedConsumerSpec) (jetstream.ConsumerConfig, error) {
	if err := streams.ValidateTaskType(spec.TaskType); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if err := ValidatePartitions(spec.Partitions); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if spec.Partition < 0 || spec.Partition >= spec.Partitions {
		return jetstream.ConsumerConfig{}, fmt.Errorf("streams: partition %d of %d", spec.Partition, spec.Partitions)
	}
	if spec.MaxDeliver == 0 {
		spec.MaxDeliver = DefaultMaxDeliver
	}
	if spec.AckWait <= 0 {
		spec.AckWait = DefaultAckWait
	}
	// The partition's slots: the bits filter and, with Legacy, the
	// subjects earlier versions published to (streams/ordering.go).
	filters := []string{names.OrderedFilter(spec.TaskType, spec.Partitions, spec.Partition)}
	for s := spec.Partition; spec.Legacy && s < streamdefs.OrderedSlots; s += spec.Partitions {
		filters = append(filters, names.LegacyOrderedSubject(spec.TaskType, s))
	}
	return jetstream.ConsumerConfig{
		Durable: names.OrderedConsumerName(spec.TaskType, spec.Partitions, spec.Partition),
		Description: fmt.Sprintf("jetflow ordered tasks of type %s, partition %d of %d",
			spec.TaskType, spec.Partition, spec.Partitions),
		FilterSubjects: filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxDeliver:     spec.MaxDeliver,
		AckWait:        spec.AckWait,
		MaxAckPending:  1,
		MaxWaiting:     512,
		Replicas:       spec.Replicas,
		Metadata: map[string]string{
			MetaTaskType:  spec.TaskType,
			MetaPartition: strconv.Itoa(spec.Partition) + "/" + strconv.Itoa(spec.Partitions),
		},
	}, nil
}

// EnsureOrderedConsumer creates the partition consumer of spec on the task
// stream, or updates its limits. A consumer of another partition count of
// the same type still present makes the server refuse the overlapping
// filters: drain and delete it first (see docs/ordering.md). Like
// [EnsureConsumer], each attempt gets a deadline of [RequestTimeout].
func EnsureOrderedConsumer(ctx context.Context, js jetstream.JetStream, names streams.Names, spec OrderedConsumerSpec) (jetstream.Consumer, error) {
	want, err := orderedConsumerConfig(names, spec)
	if err != nil {
		return nil, err
	}
	return ensureTaskConsumer(ctx, js, names.TaskStream(), want)
}

// ensureTaskConsumer creates the consumer want on stream, or updates it
// when its limits, filters or priority groups differ (keeping a pause an
// operator set); an equal consumer is used as it is. Each attempt gets a
// deadline of [RequestTimeout].
func ensureTaskConsumer(ctx context.Context, js jetstream.JetStream, stream string, want jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	var c jetstream.Consumer
	err := retryRequests(ctx, RequestTimeout, func(ctx context.Context) error {
		have, err := js.Consumer(ctx, stream, want.Durable)
		if err == nil {
			hc := have.CachedInfo().Config
			if hc.MaxDeliver == want.MaxDeliver && hc.AckWait == want.AckWait && hc.MaxAckPending == want.MaxAckPending &&
				hc.PinnedTTL == want.PinnedTTL && hc.PriorityPolicy == want.PriorityPolicy &&
				slices.Equal(hc.PriorityGroups, want.PriorityGroups) && slices.Equal(hc.FilterSubjects, want.FilterSubjects) &&
				(want.Replicas == 0 || hc.Replicas == want.Replicas) {
				c = have
				return nil
			}
			want.PauseUntil = hc.PauseUntil
		}
		c, err = js.CreateOrUpdateConsumer(ctx, stream, want)
		return err
	})
	if err != nil {
		return nil, consumerErr(stream, want.Durable, err)
	}
	return c, nil
}
