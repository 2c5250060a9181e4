package framework

import (
	"context"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/topology"
)

// WithDelayMover turns the worker's delay mover on or off. Workers only.
// Default on. A producer publishes a delayed task to the delay stream
// ([streams.Names.DelayStream]), which refuses Nats-Rollup, not to the
// schedule stream, which must allow it; the mover, run by every worker on
// one shared durable consumer, validates each delayed task, stores its
// schedule in the schedule stream and acknowledges it. A delayed task that
// can never become a schedule (an invalid ID, due time or target) is
// dead-lettered with reason "invalid" (type "_invalid" when its target
// names no valid type). The mover stores a schedule only where none is
// pending: a delayed task whose ID already has a pending schedule from
// another delayed task (another producer's, or the same ID enqueued again
// after the duplicate window) leaves that schedule unchanged and is
// dead-lettered with reason "conflict", logged at warn level and counted
// ([Stats].DelaysConflicts). The mover uses the shared consumer that
// streams.Ensure creates as it finds it, and creates it only when it does
// not exist. Turn it off only in workers whose credentials may
// not read the delay stream or write the schedule stream: while no worker
// moves, delayed tasks wait in the delay stream and fire late, never early.
func WithDelayMover(enabled bool) WorkerOption {
	return workerOnly(func(o *options) error { o.noDelayMover = !enabled; return nil })
}

// installDelayMover installs the mover unless WithDelayMover(false).
func (w *Worker) installDelayMover() {
	if w.opts.noDelayMover {
		return
	}
	var reject func(context.Context, delays.Rejected) error
	if !w.opts.deadLetters.disabled {
		core := deadletter.NewCore(w.nc, w.js, topology.DeadLetterTopology(w.names), w.log)
		reject = core.RejectDelayed(w.names.DelayStream(), ErrCorruptTask)
	}
	w.mover = delays.New(w.nc, w.js, topology.DelayTopology(w.names), w.log, reject)
	w.addExtension(extension{Plugin: Plugin{Name: "delay-mover", Service: func(ctx context.Context, _ *Worker) { w.mover.Run(ctx) }}})
}
