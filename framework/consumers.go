package framework

import (
	"context"
	"slices"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// maxEnsuring bounds the consumers [Worker.Start] ensures at once.
const maxEnsuring = 8

// ensureConsumers ensures the consumer of every registered (type, priority)
// pair, up to maxEnsuring at once: on a cluster each new consumer is a
// round of the meta group and a raft group of its own (about 60 ms each
// for R3 on loopback), so a worker serving ten types at four priorities
// would otherwise start one after the other for seconds. The consumers come
// back in registration order. The first error ends the others and is
// returned.
func (w *Worker) ensureConsumers(ctx context.Context) ([]consumerSub, error) {
	return w.ensureConsumersIn(ctx, w.partitions(), w.layout()) // partitions.go
}

// ensureConsumersIn is ensureConsumers in the task partitions of parts, of
// layout l: in the partitions of parts that serve each type (all of them,
// unless l spreads by type), with a cap set with WithMaxInFlight split
// over all the partitions of l that serve the type.
func (w *Worker) ensureConsumersIn(ctx context.Context, parts []streams.Names, l streams.Layout) ([]consumerSub, error) {
	var subs []consumerSub
	for _, names := range parts {
		k := names.PartitionIndex()
		for _, tt := range w.order {
			served := l.ServedBy(tt.name)
			share := slices.Index(served, k)
			if share < 0 {
				continue // spread by type: another partition's type
			}
			for _, p := range tt.cfg.priorities {
				spec := w.consumerSpec(tt, p)
				if tt.cfg.capSet {
					spec.MaxAckPending = topology.PartitionCap(spec.MaxAckPending, len(served), share)
				}
				subs = append(subs, consumerSub{tt: tt, prio: p, ensure: func(ctx context.Context) (jetstream.Consumer, error) {
					return topology.EnsureConsumer(ctx, w.js, names, spec)
				}})
			}
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		failed   sync.Once
		firstErr error
		wg       sync.WaitGroup
	)
	sem := make(chan struct{}, maxEnsuring)
	for i := range subs {
		sub := &subs[i]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			err := w.starting.waitingFor("consumer "+w.names.ConsumerName(sub.tt.name, sub.prio), func() error {
				return w.startStep(ctx, func(ctx context.Context) (err error) {
					sub.cons, err = sub.ensure(ctx)
					return err
				})
			})
			if err != nil {
				// The first error is the cause; the cancellations it
				// causes in the other pairs come after it.
				failed.Do(func() { firstErr = err; cancel() })
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return subs, nil
}

func (w *Worker) consumerSpec(tt *typeRunner, p Priority) topology.ConsumerSpec {
	return topology.ConsumerSpec{
		TaskType:      tt.name,
		Priority:      p,
		MaxDeliver:    tt.cfg.maxAttempts,
		AckWait:       tt.cfg.ackWait,
		MaxAckPending: tt.cfg.maxInFlight,
	}
}
