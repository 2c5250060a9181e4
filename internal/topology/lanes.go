package topology

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
)

// Lanes: an ordered type's slots read by a few consumers with many tasks in
// flight each, every one pinned to one worker at a time by a priority
// group, which runs each key's tasks in order in memory (decision 049).

// MetaLane is the consumer metadata key holding "<lane>/<lanes>" on lane
// consumers.
const MetaLane = "jetflow.lane"

// ParseLane reads the lane and lane count a lane consumer's metadata
// holds (MetaLane, written by EnsureLaneConsumer); ok is false for
// metadata that is not a valid lane's (another consumer, or a forged one).
func ParseLane(meta map[string]string) (lane, lanes int, ok bool) {
	ls, ns, found := strings.Cut(meta[MetaLane], "/")
	l, err1 := strconv.Atoi(ls)
	n, err2 := strconv.Atoi(ns)
	if !found || err1 != nil || err2 != nil || ValidatePartitions(n) != nil || l < 0 || l >= n {
		return 0, 0, false
	}
	return l, n, true
}

// LaneGroup is the priority group of every lane consumer.
const LaneGroup = "lane"

// Lane defaults.
const (
	// DefaultLaneMaxAckPending is how many tasks a lane delivers before
	// one is acknowledged: the keys of the lane that run at once, and the
	// tasks queued behind them.
	DefaultLaneMaxAckPending = 256
	// DefaultLanePinnedTTL is how long a lane's owner may go without a
	// pull request before the server pins the lane to another worker.
	DefaultLanePinnedTTL = 5 * time.Second
)

// LaneConsumerSpec declares one lane consumer of an ordered task type.
type LaneConsumerSpec struct {
	// TaskType is the ordered task type. Required.
	TaskType string
	// Lanes is the type's lane count, a power of two up to
	// streamdefs.OrderedSlots. Required.
	Lanes int
	// Lane is this consumer's lane, 0 to Lanes-1.
	Lane int
	// MaxDeliver is the number of deliveries before the server gives up on
	// a task; -1 for no limit (the worker counts attempts and blocks the
	// key). Default 25.
	MaxDeliver int
	// AckWait is how long a delivered task may go without an ack or a
	// heartbeat before it is redelivered. Default 30 s.
	AckWait time.Duration
	// MaxAckPending is the tasks in flight at once. Default
	// [DefaultLaneMaxAckPending].
	MaxAckPending int
	// PinnedTTL is how long the owner may stop pulling before the lane
	// moves. Default [DefaultLanePinnedTTL].
	PinnedTTL time.Duration
	// Replicas is the consumer's replica count; 0 inherits the stream's.
	Replicas int
}

// laneConsumerConfig returns the JetStream configuration of spec under
// names: one bits filter, many tasks in flight, the pinned priority group.
func laneConsumerConfig(names streams.Names, spec LaneConsumerSpec) (jetstream.ConsumerConfig, error) {
	if err := streams.ValidateTaskType(spec.TaskType); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if err := ValidatePartitions(spec.Lanes); err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	if spec.Lane < 0 || spec.Lane >= spec.Lanes {
		return jetstream.ConsumerConfig{}, fmt.Errorf("streams: lane %d of %d", spec.Lane, spec.Lanes)
	}
	if spec.MaxDeliver == 0 {
		spec.MaxDeliver = DefaultMaxDeliver
	}
	if spec.AckWait <= 0 {
		spec.AckWait = DefaultAckWait
	}
	if spec.MaxAckPending <= 0 {
		spec.MaxAckPending = DefaultLaneMaxAckPending
	}
	if spec.PinnedTTL <= 0 {
		spec.PinnedTTL = DefaultLanePinnedTTL
	}
	return jetstream.ConsumerConfig{
		Durable:        names.LaneConsumerName(spec.TaskType, spec.Lanes, spec.Lane),
		Description:    fmt.Sprintf("jetflow ordered tasks of type %s, lane %d of %d", spec.TaskType, spec.Lane, spec.Lanes),
		FilterSubjects: []string{names.OrderedFilter(spec.TaskType, spec.Lanes, spec.Lane)},
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxDeliver:     spec.MaxDeliver,
		AckWait:        spec.AckWait,
		MaxAckPending:  spec.MaxAckPending,
		MaxWaiting:     512,
		Replicas:       spec.Replicas,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PriorityGroups: []string{LaneGroup},
		PinnedTTL:      spec.PinnedTTL,
		Metadata: map[string]string{
			MetaTaskType: spec.TaskType,
			MetaLane:     strconv.Itoa(spec.Lane) + "/" + strconv.Itoa(spec.Lanes),
		},
	}, nil
}

// EnsureLaneConsumer creates the lane consumer of spec on the task stream,
// or updates its limits. The serial partitions of the same type, still
// present, make the server refuse the overlapping filter: drain and delete
// them first (docs/ordering.md). Like [EnsureConsumer], each attempt gets a
// deadline of [RequestTimeout].
func EnsureLaneConsumer(ctx context.Context, js jetstream.JetStream, names streams.Names, spec LaneConsumerSpec) (jetstream.Consumer, error) {
	want, err := laneConsumerConfig(names, spec)
	if err != nil {
		return nil, err
	}
	return ensureTaskConsumer(ctx, js, names.TaskStream(), want)
}
