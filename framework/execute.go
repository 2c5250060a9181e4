package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/internal/attempt"
	"github.com/jetflow-io/jetflow/internal/intake"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/settle"
	"github.com/jetflow-io/jetflow/internal/taskctx"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/textcut"
)

// Execution: the executor (internal/attempt) runs every dispatched task's
// attempts and settles them; the worker supplies the task's side of it
// (execSide): the public Task, the handler call in its context, the
// extensions' holds and hooks, and the message operations (delivery). The
// intake (intake.go) answers for the task's slot and the tasks that follow
// it (Next, Requeue, Withdraw, Reclaim, HandBack), and a pending task for
// its own marks (Claim, Resumed, Orphaned). A task that runs once and
// succeeds crosses to this side four times: Prepare, Call, Settling,
// Settled.

// execSide is the worker as the executor sees it ([attempt.Worker]).
type execSide struct {
	*intake.Stage[*typeRunner, taskState]
	w *Worker
}

var _ attempt.Worker[*pending] = (*execSide)(nil)

// newExecutor returns the worker's executor; tests replace its clock and
// its yield between tasks (wallHook, yieldHook) before Start.
func (w *Worker) newExecutor() *attempt.Executor[*pending] {
	return attempt.New(&execSide{Stage: w.in, w: w}, attempt.Config{
		Ctx: w.hardCtx, Stop: w.in.Stopped(), Now: w.wallHook, Yield: w.yieldHook, Counters: &w.stats.Counters,
	})
}

// Prepare fills p's task and fails it for good when its due time cannot be
// trusted (rather than holding a slot until a bogus time); a payload
// version the handler does not accept goes back to the queue, for a worker
// that does (versions.go). The heartbeat sweeper keeps the task alive while
// it waits for its time or runs (internal/intake).
func (x *execSide) Prepare(p *pending) (time.Time, bool) {
	w := x.w
	t := &p.X.task
	w.fillTask(t, p)
	if err := checkDelivered(t, p.Msg); err != nil {
		w.attempts.Settle(p, err, 0)
		return time.Time{}, false
	}
	if w.versions.Refuse(p) {
		return time.Time{}, false
	}
	p.X.base = taskCtx{Context: w.hardCtx, Key: taskctx.Key{}, Val: t}
	return t.ScheduledFor, true
}

// Call runs the middleware chain and the handler with the type's timeout
// (handlerctx.go), after the extensions and the Started hooks, then ends
// the attempt: it names a timeout as such, ends the attempt's context and
// records the handler's time for the pull size (intake.Type.Pace). The
// first attempt's context is p's own; a rerun gets a fresh one, since a
// handler may keep its context after it returned.
func (x *execSide) Call(p *pending, first bool, start time.Time) error {
	s, t, tt := &p.X, &p.X.task, p.Type.Ext
	if first {
		s.ctx = &s.first
	} else {
		s.ctx = new(handlerCtx)
	}
	ctx := s.ctx
	ctx.Init(&s.base, taskctx.Key{}, t, start, tt.cfg.timeout, ErrHandlerTimeout)
	x.Stamp(p, start)          // for the pull sizes
	x.w.events.Started(ctx, t) // the extensions, then the hooks (internal/hookset)
	err := tt.handler.Handle(ctx, t)
	if err != nil && ctx.TimedOut() && !errors.Is(err, ErrHandlerTimeout) {
		err = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, tt.cfg.timeout, err)
	}
	ctx.End()
	p.Type.Pace.Observe(time.Since(start))
	return err
}

// Panicked logs a handler's panic and ends the attempt as Call would have;
// its error wraps ErrPanic, and ErrHandlerTimeout when the attempt ran out
// of time first.
func (x *execSide) Panicked(p *pending, r any, stack []byte, took time.Duration) error {
	p.X.task.Logger().Error("jetflow handler panicked", slog.Any("panic", r), slog.String("stack", string(stack)))
	err := fmt.Errorf("%w: %v", ErrPanic, r)
	if p.X.ctx.TimedOut() {
		err = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, p.Type.Ext.cfg.timeout, err)
	}
	p.X.ctx.End()
	p.Type.Pace.Observe(took)
	return err
}

// Hold asks the extensions whether a failed attempt is rerun in process
// (never a permanent failure).
func (x *execSide) Hold(p *pending, err error) (time.Duration, bool) {
	if IsPermanent(err) {
		return 0, false
	}
	return x.w.events.Hold(&p.X.task, err)
}

// Lend logs the held task p and lends its slot (intake.Stage.LendSlot);
// it returns the fetched task the slot was granted to, for the caller to
// run in p's place (nil: none).
func (x *execSide) Lend(p *pending, d time.Duration, cause error) *pending {
	p.X.task.Logger().Info("jetflow task held in process", slog.Any(LogKeyError, cause), slog.Duration("rerun_in", d))
	return x.LendSlot(p)
}

// Settling turns an attempt's error into the input of the settlement
// decision, with the type's policy, and gives p's message operations.
func (x *execSide) Settling(p *pending, err error) (settle.Result, settle.Policy, settle.Delivery) {
	pol := settle.Policy{MaxAttempts: p.X.task.MaxAttempts, Backoff: p.Type.Ext.backoff, DeadLetters: x.w.deadLetter != nil}
	return classify(err, p.X.task.Attempt), pol, (*delivery)(p)
}

// classify turns an attempt's error into the input of the settlement
// decision.
func classify(err error, attempt int) settle.Result {
	if err == nil {
		return settle.Result{Attempt: attempt}
	}
	r := settle.Result{Failed: err != nil, Permanent: IsPermanent(err), Attempt: attempt}
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		r.RetryAfter, r.HasRetryAfter = ra.Delay, true
	}
	return r
}

// Settled logs what the settlement of p did and reports its outcome to the
// extensions and the hooks (the executor counted it).
func (x *execSide) Settled(p *pending, s attempt.Settlement) {
	w := x.w
	p.LaneSettled(intake.Redelivered(s))
	t, err := &p.X.task, s.Err
	o := Outcome{Err: err, Took: s.Took, Delay: s.Decision.Delay, Panicked: errors.Is(err, ErrPanic), DeadLettered: s.Carried.DeadLettered}
	switch {
	case s.Decision.Action == settle.HandBack:
	case s.Carried.DeadLetterErr != nil:
		t.Logger().Error("jetflow could not dead-letter task; retrying it later", slog.Any(LogKeyError, s.Carried.DeadLetterErr),
			slog.Any("cause", err), slog.Duration("retry_in", s.Carried.Delay))
	case s.Decision.Action == settle.Ack:
		o.Action = ActionAck
	case s.Decision.Action == settle.Fail:
		if s.Result.Permanent {
			t.Logger().Error("jetflow task failed permanently; not retried", slog.Any(LogKeyError, err))
		} else {
			t.Logger().Error("jetflow task failed on its last attempt", slog.Any(LogKeyError, err), slog.Int("max_attempts", t.MaxAttempts))
		}
		o.Action = ActionFail
	case s.Decision.Action == settle.Retry:
		t.Logger().Warn("jetflow task failed; will retry", slog.Any(LogKeyError, err), slog.Duration("retry_in", s.Decision.Delay))
		o.Action = ActionRetry
	}
	if !s.Finished() {
		return
	}
	var ctx context.Context = w.hardCtx
	if p.X.base.Context != nil {
		ctx = &p.X.base
	}
	w.events.Finished(ctx, t, o)
}

// delivery is a pending task as settlement carries a decision out on it
// (settle.Delivery).
type delivery pending

// Ack goes through the intake's acker (one goroutine writes the
// executors' acks) for the worker's own deliveries.
func (d *delivery) Ack() error {
	t := &d.X.task
	return t.worker.in.Ack((*pending)(d), t.Sequence)
}
func (d *delivery) Nak() error                             { return d.Msg.Nak() }
func (d *delivery) NakWithDelay(delay time.Duration) error { return d.Msg.NakWithDelay(delay) }
func (d *delivery) TermWithReason(reason string) error     { return d.Msg.TermWithReason(reason) }
func (d *delivery) RetryDelay() time.Duration              { return d.Type.Ext.cfg.backoff.Delay(d.X.task.Attempt) }

func (d *delivery) DeadLetter(cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.X.task.worker.deadLetter(ctx, &d.X.task, d.Msg, cause)
}

func (d *delivery) NotSent(op string, err error) {
	t := &d.X.task
	t.worker.ackFailed(t.worker.hardCtx, t, (*pending)(d), op, err)
}

// ackFailed logs and counts an Ack, Nak, InProgress or Term that could not
// be sent, and reports it to the AckFailed hook. t may be nil (heartbeats,
// hand-backs): the task is then read from p's message and put in ctx.
func (w *Worker) ackFailed(ctx context.Context, t *Task, p *pending, op string, err error) {
	w.stats.ackErrors.Add(1)
	w.log.Error("jetflow could not "+op+" task; it will be redelivered after its ack wait",
		slog.String(LogKeyTaskType, p.Type.Name), slog.Any(LogKeyError, err))
	if t == nil {
		t = w.newTask(p)
	}
	if TaskFromContext(ctx) == nil {
		ctx = taskctx.With(ctx, t)
	}
	w.events.AckFailed(ctx, t, op, err)
}

// newTask returns a new Task of p (for reports outside its execution).
func (w *Worker) newTask(p *pending) *Task {
	t := new(Task)
	w.fillTask(t, p)
	return t
}

// fillTask sets t from p's message.
func (w *Worker) fillTask(t *Task, p *pending) {
	msg := p.Msg
	*t = Task{
		Type:        p.Type.Name,
		Priority:    p.Prio,
		MaxAttempts: p.Type.MaxAttempts,
		Headers:     msg.Headers(),
		Payload:     msg.Data(),
		Stream:      w.in.Partitions().StreamOf(msg.Subject()),
		subject:     msg.Subject(),
		Attempt:     1,
		baseLogger:  w.log,
		worker:      w,
	}
	if pm, ok := msg.(*pull.Msg); ok {
		// The worker's own deliveries: read without allocating.
		if d, err := pm.Delivery(); err == nil {
			t.Attempt = int(d.NumDelivered)
			t.Sequence = d.StreamSeq
			t.EnqueuedAt = d.Timestamp
		}
	} else if md, err := msg.Metadata(); err == nil {
		t.Attempt = int(md.NumDelivered)
		t.Sequence = md.Sequence.Stream
		t.EnqueuedAt = md.Timestamp
	}
	if h := t.Headers; h != nil {
		if ts := taskmsg.ParseTime(h.Get(HeaderEnqueuedAt)); !ts.IsZero() {
			t.EnqueuedAt = ts
		}
		t.ScheduledFor = taskmsg.ParseTime(h.Get(HeaderScheduledFor))
	}
	t.ID, t.wireErr = taskIDFromWire(t) // wire.go
}

// truncate cuts s to at most n bytes without splitting a UTF-8 character.
func truncate(s string, n int) string { return textcut.Cut(s, n) }
