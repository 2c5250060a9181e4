package intake

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Spec is what [Plan] needs of a registered task type.
type Spec struct {
	// Name is the task type.
	Name string
	// Priorities are the priorities the worker serves for it.
	Priorities []streams.Priority
	// MaxAttempts, AckWait and MaxInFlight are the consumer's MaxDeliver,
	// AckWait and MaxAckPending (topology.ConsumerSpec, whose defaults
	// apply to zero values).
	MaxAttempts int
	AckWait     time.Duration
	MaxInFlight int
	// CapSet is true when the user chose MaxInFlight: it is then split over
	// the partitions that serve the type, else it applies to each.
	CapSet bool
}

// Consumer is one consumer of a [Plan].
type Consumer struct {
	// Names are the names of the consumer's task partition.
	Names streams.Names
	// Type is the index of its type in the types given to Plan.
	Type int
	// Spec is the consumer's spec.
	Spec topology.ConsumerSpec
}

// Plan returns the consumers of types in the partitions parts of layout
// l: for each partition in order, each type it serves (all of them, unless
// l spreads by type) in the order of types, each of its priorities in
// order.
func Plan(parts []streams.Names, l streams.Layout, types []Spec) []Consumer {
	var out []Consumer
	for _, names := range parts {
		k := names.PartitionIndex()
		for i, t := range types {
			served := l.ServedBy(t.Name)
			share := slices.Index(served, k)
			if share < 0 {
				continue // spread by type: another partition's type
			}
			for _, p := range t.Priorities {
				spec := topology.ConsumerSpec{TaskType: t.Name, Priority: p, MaxDeliver: t.MaxAttempts,
					AckWait: t.AckWait, MaxAckPending: t.MaxInFlight}
				if t.CapSet {
					spec.MaxAckPending = topology.PartitionCap(spec.MaxAckPending, len(served), share)
				}
				out = append(out, Consumer{Names: names, Type: i, Spec: spec})
			}
		}
	}
	return out
}

// EnsureAll calls ensure for each of 0..n-1, up to limit at once (at least
// one): on a cluster each new consumer is a round of the meta group and a
// raft group of its own, so ensuring them one after the other would take
// seconds. The first error cancels the ctx of the others and is returned
// (the cancellations it causes come after it); EnsureAll returns once
// every call has.
func EnsureAll(ctx context.Context, n, limit int, ensure func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		failed   sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, max(limit, 1))
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := ensure(ctx, i); err != nil {
				failed.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	return firstErr
}

// Ensure ensures the consumer of every registered (type, priority) pair in
// the partitions served, up to maxEnsuring at once ([EnsureAll]), in
// registration order, each a start-up step (Config.Step). The first error
// ends the others and is returned.
func (s *Stage[T, X]) Ensure(ctx context.Context) ([]Source[T], error) {
	ps := s.Partitions()
	return s.ensureIn(ctx, ps.Names(), ps.Layout())
}

// ensureIn is Ensure in the task partitions parts of layout l.
func (s *Stage[T, X]) ensureIn(ctx context.Context, parts []streams.Names, l streams.Layout) ([]Source[T], error) {
	specs := make([]Spec, len(s.types))
	for i, t := range s.types {
		specs[i] = t.Spec
	}
	plan := Plan(parts, l, specs)
	srcs := make([]Source[T], len(plan))
	for i, c := range plan {
		srcs[i] = Source[T]{Type: s.types[c.Type], Prio: c.Spec.Priority, Ensure: func(ctx context.Context) (jetstream.Consumer, error) {
			return topology.EnsureConsumer(ctx, s.cfg.JS, c.Names, c.Spec)
		}}
	}
	err := EnsureAll(ctx, len(srcs), maxEnsuring, func(ctx context.Context, i int) error {
		src := &srcs[i]
		return s.cfg.Step(ctx, "consumer "+s.cfg.Names.ConsumerName(src.Type.Name, src.Prio), func(ctx context.Context) (err error) {
			src.Cons, err = src.Ensure(ctx)
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	return srcs, nil
}
