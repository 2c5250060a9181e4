package framework

import (
	"context"
	"fmt"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/streams"
)

// WithDelayMover turns the worker's delay mover on or off. Workers only.
// Default on. A producer publishes a delayed task to the delay stream
// ([streams.Names.DelayStream]), which refuses Nats-Rollup, not to the
// schedule stream, which must allow it; the mover, run by every worker on
// one shared durable consumer, validates each delayed task, stores its
// schedule in the schedule stream and acknowledges it. A delayed task that
// can never become a schedule (an invalid ID, due time or target) is
// dead-lettered with reason "invalid" (type "_invalid" when its target
// names no valid type). Turn it off only in workers whose credentials may
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
	n := w.names
	var reject func(context.Context, delays.Rejected) error
	if !w.opts.deadLetters.disabled {
		core := newDeadLetterCore(w.nc, w.js, n, w.log)
		reject = func(ctx context.Context, r delays.Rejected) error {
			return core.WriteRejected(ctx, n.DelayStream(), deadletter.Attempt{Seq: r.Seq, Subject: r.Subject,
				Header: r.Header, Payload: r.Data, ID: r.ID, Type: r.Type, Priority: r.Priority, Attempt: r.Deliveries,
				Cause: fmt.Errorf("%w: delayed task: %w", ErrCorruptTask, r.Cause)})
		}
	}
	w.mover = delays.New(w.nc, w.js, streams.DelayTopology(n), w.log, reject)
	w.addExtension(extension{Plugin: Plugin{Name: "delay-mover", Service: func(ctx context.Context, _ *Worker) { w.mover.Run(ctx) }}})
}
