package framework

import (
	"cmp"
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

type deadLetterOptions struct {
	disabled       bool
	routerDisabled bool
	reconcileEvery time.Duration // 0: DefaultReconcileInterval
	errorTTL       time.Duration // 0: DefaultErrorRetention
}

// WithDeadLetters turns the worker's dead-letter handling on or off. Workers
// only. Default on: a task that fails permanently, cannot be decoded, or
// fails its last attempt is written to the dead-letter stream before it is
// removed from the task stream; every failed attempt is recorded in the
// errors bucket ([streams.Names.ErrorsBucket]) so that records written
// later by the router still carry the last error; and the worker runs the
// dead-letter router ([WithDeadLetterRouter]).
//
// Off, a permanent failure is removed without a record, a failed last attempt
// is handed back to the server, which emits a max-deliveries advisory that
// the router of another worker (or package dlq's Queue.Reconcile) routes, without
// the error.
func WithDeadLetters(enabled bool) WorkerOption {
	return workerOnly(func(o *options) error { o.deadLetters.disabled = !enabled; return nil })
}

// WithDeadLetterRouter turns the worker's dead-letter router and reconciler
// on or off. Workers only. Default on (when [WithDeadLetters] is on). The
// router moves tasks that reached their max deliveries without their
// worker's help (the worker crashed, lost its connection, or has dead
// letters off) to the dead-letter stream, from the advisories captured in
// the advisory stream; the reconciler finds those whose advisory was lost.
// Both are safe to run in every worker process at once.
func WithDeadLetterRouter(enabled bool) WorkerOption {
	return workerOnly(func(o *options) error { o.deadLetters.routerDisabled = !enabled; return nil })
}

// dlqExt is a worker's dead-letter extension, on the cores of its task
// partitions (deadletter.Cores): one router reads the advisories of all of
// them and routes each on the core of its task's own partition; each
// partition's core runs the reconciler of its stream. Partitions added
// while the worker runs (intake.Stage.CheckPartitions) get theirs then.
type dlqExt struct {
	cores *deadletter.Cores[streams.Names]
}

// installDeadLetters installs the dead-letter extension unless
// WithDeadLetters(false).
func (w *Worker) installDeadLetters() {
	o := w.opts.deadLetters
	if o.disabled {
		return
	}
	ttl, every := cmp.Or(o.errorTTL, DefaultErrorRetention), cmp.Or(o.reconcileEvery, DefaultReconcileInterval)
	x := &dlqExt{cores: deadletter.NewCores(w.names, w.deadLetterCore, streams.MaxPartitions, ttl, every)}
	e := extension{
		Plugin: Plugin{Name: "dead-letters", Finished: x.finished,
			// The streams, the errors bucket, the cores of further partitions.
			Prepare: func(ctx context.Context, w *Worker) error { return x.cores.Prepare(ctx, w.partitions()[1:]) }},
		deadLetter: x.deadLetter,
		grown:      func(ctx context.Context, _ *Worker, parts []streams.Names) error { return x.cores.Grow(ctx, parts) },
	}
	if !o.routerDisabled {
		e.Service = func(ctx context.Context, _ *Worker) { x.cores.Run(ctx) }
	}
	w.addExtension(e)
}

// deadLetterCore returns the dead-letter core of one task partition,
// reporting routed tasks and acknowledgement errors to the worker.
func (w *Worker) deadLetterCore(names streams.Names) *deadletter.Core {
	c := deadletter.NewCore(w.nc, w.js, topology.DeadLetterTopology(names), w.log)
	c.Routed = w.stateRouted // state_tracking.go
	c.AckErrors = &w.stats.ackErrors
	return c
}

// finished records a failed attempt that will be retried.
func (x *dlqExt) finished(_ context.Context, t *Task, o Outcome) {
	if o.Action == ActionRetry {
		x.cores.Of(t.Stream).RecordFailure(attemptOf(t, "", o.Err))
	}
}

// deadLetter writes the record of a task the worker is about to terminate.
func (x *dlqExt) deadLetter(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error {
	reason := deadletter.ReasonOf(cause, IsPermanent(cause), ErrCorruptTask, ErrDecode, ErrVersion)
	return x.cores.Of(t.Stream).WriteFromWorker(ctx, attemptOf(t, msg.Subject(), cause), reason, t.Logger())
}

// attemptOf describes the failed attempt of t for the dead-letter core.
func attemptOf(t *Task, subject string, cause error) deadletter.Attempt {
	return deadletter.Attempt{Seq: t.Sequence, Subject: subject, Header: t.Headers, Payload: t.Payload,
		ID: t.ID, Type: t.Type, Priority: t.Priority.String(), Attempt: t.Attempt, Cause: cause}
}
