package framework

import (
	"context"
	"fmt"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/intake"
	"github.com/jetflow-io/jetflow/streams"
)

// The intake (internal/intake) pulls the worker's tasks and brings them to
// the executors: the consumers of the registered types and the extensions'
// (ordered partitions, lanes) in every task partition, a fetcher or a
// lane's runner for each, the scheduler that shares the slots, the direct
// paths from a pull buffer to an executor, the heartbeats and the acker.
// The worker registers its types with it and reports what only it knows:
// failed acknowledgements and lost pulls to the hooks, its start-up steps,
// the extensions' consumers of added partitions.

// newStage returns the worker's intake.
func (w *Worker) newStage() *intake.Stage[*typeRunner, taskState] {
	o := w.opts
	return intake.New(intake.Config[*typeRunner, taskState]{
		Conn: w.nc, JS: w.js, Names: w.names, Log: w.log,
		Concurrency: o.concurrency, Weighted: o.weighted, Weights: o.weights,
		Loops: &w.health,
		Counters: intake.Counters{HandedBack: &w.stats.HandedBack, AckErrors: &w.stats.ackErrors,
			PullsLost: &w.stats.pullsLost, StartedDirect: &w.stats.startedDirect},
		Self: o.fleet.id, Ctx: w.hardCtx,
		Workers: func(ctx context.Context) (*fleet.Listing, error) {
			return fleetRules.List(ctx, w.js, w.names.WorkersBucket())
		},
		Step: w.step, // startwait.go
		Grown: func(ctx context.Context, added []streams.Names) ([]consumerSub, error) {
			return w.extConsumers(ctx, added, true)
		},
		AckFailed: func(p *pending, op string, err error) { w.ackFailed(context.Background(), nil, p, op, err) },
		PullLost:  w.events.PullLost,
	})
}

// addType registers tt with the intake: its consumers, pulls, slots and
// lanes.
func (w *Worker) addType(tt *typeRunner) {
	c := &tt.cfg
	tt.in = intake.Type[*typeRunner]{
		Spec: intake.Spec{Name: tt.name, Priorities: c.priorities, MaxAttempts: c.maxAttempts, AckWait: c.ackWait,
			MaxInFlight: c.maxInFlight, CapSet: c.capSet},
		Heartbeat: c.heartbeat, Concurrency: c.concurrency, Prefetch: c.prefetch, PrefetchSet: c.prefetchSet, Ext: tt,
	}
	if o := c.ordering; o != nil && o.Lanes > 0 {
		tt.in.Lanes, tt.in.Gate = o.Lanes, intake.LaneGate(o.PerKey, o.Limit)
	}
	w.in.Add(&tt.in)
}

// extConsumers returns the extensions' consumers in the task partitions
// parts (ordered partitions, lanes): at Start, and for partitions added
// while the worker runs (grown), after telling the extensions of them.
func (w *Worker) extConsumers(ctx context.Context, parts []streams.Names, grown bool) ([]consumerSub, error) {
	var subs []consumerSub
	for i := range w.ext {
		if f := w.ext[i].consumers; f != nil {
			more, err := f(ctx, w, parts)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", w.ext[i].Name, err)
			}
			subs = append(subs, more...)
		}
		if f := w.ext[i].grown; f != nil && grown {
			if err := f(ctx, w, parts); err != nil {
				return nil, fmt.Errorf("%s: %w", w.ext[i].Name, err)
			}
		}
	}
	return subs, nil
}

// partitions returns the names of the task partitions the worker serves
// (streams.Config.Partitions, decision 046): the base names alone before
// Start.
func (w *Worker) partitions() []streams.Names { return w.in.Partitions().Names() }

// TaskStreams returns the task streams the worker serves, one per task
// partition (streams.Config.Partitions), read at [Worker.Start] and when
// partitions are added: the base task stream alone before Start. Plugins
// that act on a type's consumers (a breaker pausing them) act in each.
func (w *Worker) TaskStreams() []string { return w.in.Partitions().Streams() }
