package intake

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Ordered types (framework.WithOrdering) are read by consumers of their
// own beside the (type, priority) ones: in each task partition, the
// partition holding the keys that hash to it (decision 046), one consumer
// per ordered partition with one task in flight, or one per lane, pinned
// to a worker (decision 049). The worker maps its option to an [Ordered]
// spec; the stage ensures the consumers and pulls them like any other.

// Ordered is the spec of an ordered type's consumers.
type Ordered struct {
	// TaskType is the ordered task type.
	TaskType string
	// Partitions is the type's ordered partition count, a divisor of
	// streamdefs.OrderedSlots; unused when Lanes is set.
	Partitions int
	// Lanes, when above 0, is the type's lane count, a power of two up to
	// streamdefs.OrderedSlots: it is read in lanes instead of partitions.
	Lanes int
	// MaxDeliver is the consumers' delivery limit, -1 when the worker
	// counts attempts itself (a key blocked on a failed task); AckWait
	// their ack wait. Zero values take topology's defaults.
	MaxDeliver int
	AckWait    time.Duration
	// Legacy makes ordered partitions read the slot subjects of earlier
	// versions too (topology.OrderedConsumerSpec's Legacy); lanes never do.
	// [Stage.EnsureOrdered] sets it from the deployment's layout.
	Legacy bool
}

// OrderedConsumer is one consumer of [PlanOrdered]: an ordered
// partition's, or a lane's when Lane is set.
type OrderedConsumer struct {
	// Names are the names of its task partition.
	Names streams.Names
	// Name is its name in the partition's task stream.
	Name string
	// Lane is set for a lane's consumer, of spec LaneSpec; an ordered
	// partition's has spec Partition.
	Lane      bool
	LaneSpec  topology.LaneConsumerSpec
	Partition topology.OrderedConsumerSpec
}

// PlanOrdered returns the consumers of the ordered type o in the task
// partitions parts: for each partition in order, its ordered partitions
// (or lanes) in order.
func PlanOrdered(parts []streams.Names, o Ordered) []OrderedConsumer {
	var out []OrderedConsumer
	for _, names := range parts {
		if o.Lanes > 0 {
			for l := range o.Lanes {
				spec := topology.LaneConsumerSpec{TaskType: o.TaskType, Lanes: o.Lanes, Lane: l,
					MaxDeliver: o.MaxDeliver, AckWait: o.AckWait}
				out = append(out, OrderedConsumer{Names: names, Name: names.LaneConsumerName(o.TaskType, o.Lanes, l),
					Lane: true, LaneSpec: spec})
			}
			continue
		}
		for p := range o.Partitions {
			spec := topology.OrderedConsumerSpec{TaskType: o.TaskType, Partitions: o.Partitions, Partition: p,
				MaxDeliver: o.MaxDeliver, AckWait: o.AckWait, Legacy: o.Legacy}
			out = append(out, OrderedConsumer{Names: names, Name: names.OrderedConsumerName(o.TaskType, o.Partitions, p),
				Partition: spec})
		}
	}
	return out
}

// ensure creates or updates c's consumer on js.
func (c OrderedConsumer) ensure(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	if c.Lane {
		return topology.EnsureLaneConsumer(ctx, js, c.Names, c.LaneSpec)
	}
	return topology.EnsureOrderedConsumer(ctx, js, c.Names, c.Partition)
}

// EnsureOrdered ensures the consumers of t, an ordered type of spec o, in
// the task partitions parts ([PlanOrdered]), one after the other, each a
// start-up step (Config.Step) named "consumer <stream>/<name>", and
// returns them to pull ([Stage.Pull]): at normal priority, the only one
// an ordered task has, and a lane's marked with its task partition. The
// partitions of a deployment created by an earlier version also read its
// slot subjects (streams.Layout.OldOrderedSubjects). The first error is
// returned.
func (s *Stage[T, X]) EnsureOrdered(ctx context.Context, t *Type[T], o Ordered, parts []streams.Names) ([]Source[T], error) {
	o.Legacy = s.Partitions().Layout().OldOrderedSubjects
	plan := PlanOrdered(parts, o)
	srcs := make([]Source[T], 0, len(plan))
	for _, c := range plan {
		ensure := func(ctx context.Context) (jetstream.Consumer, error) { return c.ensure(ctx, s.cfg.JS) }
		var cons jetstream.Consumer
		err := s.cfg.Step(ctx, "consumer "+c.Names.TaskStream()+"/"+c.Name, func(ctx context.Context) (err error) {
			cons, err = ensure(ctx)
			return err
		})
		if err != nil {
			return nil, err
		}
		src := Source[T]{Type: t, Prio: streams.PriorityNormal, Cons: cons, Ensure: ensure}
		if c.Lane {
			src.Lane, src.Part = true, c.Names.PartitionIndex()
		}
		srcs = append(srcs, src)
	}
	return srcs, nil
}
