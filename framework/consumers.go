package framework

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/intake"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// maxEnsuring bounds the consumers [Worker.Start] ensures at once.
const maxEnsuring = 8

// ensureConsumers ensures the consumer of every registered (type, priority)
// pair, up to maxEnsuring at once (intake.EnsureAll), in registration
// order. The first error ends the others and is returned.
func (w *Worker) ensureConsumers(ctx context.Context) ([]consumerSub, error) {
	return w.ensureConsumersIn(ctx, w.partitions(), w.layout()) // partitions.go
}

// ensureConsumersIn is ensureConsumers in the task partitions of parts, of
// layout l (intake.Plan: the partitions of parts that serve each type, with
// a cap set with WithMaxInFlight split over them).
func (w *Worker) ensureConsumersIn(ctx context.Context, parts []streams.Names, l streams.Layout) ([]consumerSub, error) {
	types := make([]intake.Type, len(w.order))
	for i, tt := range w.order {
		types[i] = intake.Type{Name: tt.name, Priorities: tt.cfg.priorities, MaxAttempts: tt.cfg.maxAttempts,
			AckWait: tt.cfg.ackWait, MaxInFlight: tt.cfg.maxInFlight, CapSet: tt.cfg.capSet}
	}
	plan := intake.Plan(parts, l, types)
	subs := make([]consumerSub, len(plan))
	for i, c := range plan {
		subs[i] = consumerSub{tt: w.order[c.Type], prio: c.Spec.Priority, ensure: func(ctx context.Context) (jetstream.Consumer, error) {
			return topology.EnsureConsumer(ctx, w.js, c.Names, c.Spec)
		}}
	}
	err := intake.EnsureAll(ctx, len(subs), maxEnsuring, func(ctx context.Context, i int) error {
		s := &subs[i]
		return w.starting.waitingFor("consumer "+w.names.ConsumerName(s.tt.name, s.prio), func() error {
			return w.startStep(ctx, func(ctx context.Context) (err error) {
				s.cons, err = s.ensure(ctx)
				return err
			})
		})
	})
	if err != nil {
		return nil, err
	}
	return subs, nil
}
