package framework

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
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

// dlqExt is a worker's dead-letter extension.
type dlqExt struct {
	w    *Worker
	core *deadletter.Core // of the first task partition
	opts deadLetterOptions
	// parts are the cores of every task partition (dlq_partitions.go).
	parts *deadletter.Partitions
}

// installDeadLetters installs the dead-letter extension unless
// WithDeadLetters(false).
func (w *Worker) installDeadLetters() {
	o := w.opts.deadLetters
	if o.disabled {
		return
	}
	x := &dlqExt{w: w, core: w.deadLetterCore(w.names), opts: o}
	x.parts = deadletter.NewPartitions(x.core, streams.MaxPartitions)
	e := extension{
		Plugin:     Plugin{Name: "dead-letters", Finished: x.finished, Prepare: x.prepare},
		deadLetter: x.deadLetter,
		grown:      x.grow,
	}
	if !o.routerDisabled {
		e.Service = x.service
	}
	w.addExtension(e)
}

// deadLetterCore returns the dead-letter core of one task partition,
// reporting routed tasks and acknowledgement errors to the worker.
func (w *Worker) deadLetterCore(names streams.Names) *deadletter.Core {
	c := newDeadLetterCore(w.nc, w.js, names, w.log)
	c.Routed = w.stateRouted // state_tracking.go
	c.AckErrors = &w.stats.ackErrors
	return c
}

// prepare checks the streams, creates the errors bucket, and sets up a
// core for each further task partition (dlq_partitions.go).
func (x *dlqExt) prepare(ctx context.Context, w *Worker) error {
	ttl := x.opts.errorTTL
	if ttl == 0 {
		ttl = DefaultErrorRetention
	}
	if err := x.core.Prepare(ctx, ttl); err != nil {
		return err
	}
	return x.grow(ctx, w, w.partitions()[1:])
}

// finished records a failed attempt that will be retried.
func (x *dlqExt) finished(_ context.Context, t *Task, o Outcome) {
	if o.Action == ActionRetry {
		x.coreOf(t).RecordFailure(attemptOf(t, "", o.Err))
	}
}

// deadLetter writes the record of a task the worker is about to terminate.
func (x *dlqExt) deadLetter(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error {
	reason := deadletter.ReasonMaxDeliveries
	switch {
	case errors.Is(cause, ErrCorruptTask):
		reason = deadletter.ReasonInvalid
	case errors.Is(cause, ErrDecode):
		reason = deadletter.ReasonDecode
	case errors.Is(cause, ErrVersion):
		reason = deadletter.ReasonVersion
	case IsPermanent(cause):
		reason = deadletter.ReasonPermanent
	}
	return x.coreOf(t).WriteFromWorker(ctx, attemptOf(t, msg.Subject(), cause), reason, t.Logger())
}

// attemptOf describes the failed attempt of t for the dead-letter core.
func attemptOf(t *Task, subject string, cause error) deadletter.Attempt {
	return deadletter.Attempt{Seq: t.Sequence, Subject: subject, Header: t.Headers, Payload: t.Payload,
		ID: t.ID, Type: t.Type, Priority: t.Priority.String(), Attempt: t.Attempt, Cause: cause}
}

// newDeadLetterCore returns the dead-letter core of names' topology.
func newDeadLetterCore(nc *nats.Conn, js jetstream.JetStream, names streams.Names, log *slog.Logger) *deadletter.Core {
	return deadletter.NewCore(nc, js, topology.DeadLetterTopology(names), log)
}

// service runs the router and the reconciler until ctx ends.
func (x *dlqExt) service(ctx context.Context, _ *Worker) {
	every := x.opts.reconcileEvery
	if every == 0 {
		every = DefaultReconcileInterval
	}
	x.parts.Run(ctx, every)
}
