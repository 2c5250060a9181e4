package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/jetflow-io/jetflow/internal/attempt"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/settle"
	"github.com/jetflow-io/jetflow/internal/taskctx"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/textcut"
)

// Execution: the executor (internal/attempt) runs every dispatched task's
// attempts and settles them; the worker supplies the task's side of it
// (execSide): the public Task, the handler call in its context, the
// extensions' holds and hooks, and the message operations (delivery).

// execSide is the worker as the executor sees it ([attempt.Worker]).
type execSide Worker

var _ attempt.Worker[*pending] = (*execSide)(nil)

// newExecutor returns the worker's executor.
func (w *Worker) newExecutor() *attempt.Executor[*pending] {
	return attempt.New((*execSide)(w), attempt.Config{
		Ctx:  w.hardCtx,
		Stop: w.stopFetch,
		Now: func() time.Time {
			if w.wallHook != nil {
				return w.wallHook()
			}
			return time.Now()
		},
		Yield: func() {
			if w.yieldHook != nil {
				w.yieldHook()
				return
			}
			runtime.Gosched()
		},
		Counters: &w.stats.Counters,
	})
}

// Resumed reports whether p was parked (hold.go), and clears the mark.
func (x *execSide) Resumed(p *pending) bool {
	r := p.rerun
	p.rerun = false
	return r
}

// Orphaned reports whether p came from a lane this worker no longer holds
// (lanes.go): held, it goes back for the lane's new owner.
func (x *execSide) Orphaned(p *pending) bool { return p.lane != nil && !p.lane.Holds() }

// Prepare fills p's task and fails it for good when its due time cannot be
// trusted (rather than holding a slot until a bogus time); a payload
// version the handler does not accept goes back to the queue, for a worker
// that does (versions.go). The heartbeat sweeper keeps the task alive while
// it waits for its time or runs (heartbeats.go).
func (x *execSide) Prepare(p *pending) (time.Time, bool) {
	w := (*Worker)(x)
	t := &p.task
	w.fillTask(t, p)
	if err := checkDelivered(t, p.msg); err != nil {
		w.bg.attempts.Settle(p, err, 0)
		return time.Time{}, false
	}
	if w.checkPayloadVersion(p) {
		return time.Time{}, false
	}
	p.base = taskCtx{Context: w.hardCtx, Key: taskctx.Key{}, Val: t}
	return t.ScheduledFor, true
}

// Call runs the middleware chain and the handler with the type's timeout
// (handlerctx.go), after the extensions and the Started hooks. The first
// attempt's context is p's own; a rerun gets a fresh one, since a handler
// may keep its context after it returned.
func (x *execSide) Call(p *pending, first bool, start time.Time) error {
	w := (*Worker)(x)
	t := &p.task
	if first {
		p.ctx = &p.first
	} else {
		p.ctx = new(handlerCtx)
	}
	ctx := p.ctx
	ctx.Init(&p.base, taskctx.Key{}, t, start, p.tt.cfg.timeout, ErrHandlerTimeout) // Ended ends it
	w.lastStart.Stamp(p.prio.Rank(), start)                                         // pullsize.go
	w.emitStarted(ctx, t)
	return p.tt.handler.Handle(ctx, t)
}

// Ended names a timeout as such, ends the attempt's context and records
// the handler's time for the pull size (pullsize.go).
func (x *execSide) Ended(p *pending, err error, took time.Duration) error {
	if err != nil && p.ctx.TimedOut() && !errors.Is(err, ErrHandlerTimeout) {
		err = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, p.tt.cfg.timeout, err)
	}
	p.ctx.End()
	p.tt.pace.Observe(took)
	return err
}

// Panicked logs a handler's panic; its error wraps ErrPanic.
func (x *execSide) Panicked(p *pending, r any, stack []byte) error {
	p.task.Logger().Error("jetflow handler panicked", slog.Any("panic", r), slog.String("stack", string(stack)))
	return fmt.Errorf("%w: %v", ErrPanic, r)
}

// Hold asks the extensions whether a failed attempt is rerun in process
// (never a permanent failure).
func (x *execSide) Hold(p *pending, err error) (time.Duration, bool) {
	if IsPermanent(err) {
		return 0, false
	}
	return (*Worker)(x).holdFor(&p.task, err)
}

// Classify turns an attempt's error into the input of the settlement
// decision, with the type's policy.
func (x *execSide) Classify(p *pending, err error) (settle.Result, settle.Policy) {
	pol := settle.Policy{MaxAttempts: p.task.MaxAttempts, Backoff: p.tt.backoff, DeadLetters: x.deadLetter != nil}
	return classify(err, p.task.Attempt), pol
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

// Claim claims p's settlement (handBack claims it too).
func (x *execSide) Claim(p *pending) bool { return p.settled.CompareAndSwap(false, true) }

// Delivery returns p's message operations.
func (x *execSide) Delivery(p *pending) settle.Delivery { return (*delivery)(p) }

// HandBack returns p to the server unfinished (handBack).
func (x *execSide) HandBack(p *pending, why string) { (*Worker)(x).handBack(p, why) }

// Next is takeBuffered's task, or else the one granted p's slot (fetch.go).
func (x *execSide) Next(p *pending) *pending {
	w := (*Worker)(x)
	if q := w.takeBuffered(p); q != nil {
		return q
	}
	return w.releaseNext(p)
}

// Settled logs what the settlement of p did and reports its outcome to the
// extensions and the hooks (the executor counted it).
func (x *execSide) Settled(p *pending, s attempt.Settlement) {
	w := (*Worker)(x)
	laneSettled(p, redelivered(s))
	t, err := &p.task, s.Err
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
	if p.base.Context != nil {
		ctx = &p.base
	}
	w.emitFinished(ctx, t, o)
}

// delivery is a pending task as settlement carries a decision out on it
// (settle.Delivery).
type delivery pending

func (d *delivery) Ack() error                             { p := (*pending)(d); return p.task.worker.ack(&p.task, p) }
func (d *delivery) Nak() error                             { return d.msg.Nak() }
func (d *delivery) NakWithDelay(delay time.Duration) error { return d.msg.NakWithDelay(delay) }
func (d *delivery) TermWithReason(reason string) error     { return d.msg.TermWithReason(reason) }
func (d *delivery) RetryDelay() time.Duration              { return d.tt.cfg.backoff.Delay(d.task.Attempt) }

func (d *delivery) DeadLetter(cause error) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return d.task.worker.deadLetter(ctx, &d.task, d.msg, cause)
}

func (d *delivery) NotSent(op string, err error) {
	p := (*pending)(d)
	p.task.worker.ackFailed(p.task.worker.hardCtx, &p.task, p, op, err)
}

// ack acknowledges p's message: through the worker's acker for its own
// deliveries (one goroutine writes the executors' acks, heartbeats.go),
// directly otherwise.
func (w *Worker) ack(t *Task, p *pending) error {
	if pm, ok := p.msg.(*pull.Msg); ok && w.bg.acker != nil {
		return w.bg.acker.Ack(pm, t.Sequence, p)
	}
	return p.msg.Ack()
}

// ackFailed logs and counts an Ack, Nak, InProgress or Term that could not
// be sent, and reports it to the AckFailed hook. t may be nil (heartbeats,
// hand-backs): the task is then read from p's message and put in ctx.
func (w *Worker) ackFailed(ctx context.Context, t *Task, p *pending, op string, err error) {
	w.stats.ackErrors.Add(1)
	w.log.Error("jetflow could not "+op+" task; it will be redelivered after its ack wait",
		slog.String(LogKeyTaskType, p.tt.name), slog.Any(LogKeyError, err))
	if t == nil {
		t = w.newTask(p)
	}
	if TaskFromContext(ctx) == nil {
		ctx = taskctx.With(ctx, t)
	}
	w.emitAckFailed(ctx, t, op, err)
}

// newTask returns a new Task of p (for reports outside its execution).
func (w *Worker) newTask(p *pending) *Task {
	t := new(Task)
	w.fillTask(t, p)
	return t
}

// fillTask sets t from p's message.
func (w *Worker) fillTask(t *Task, p *pending) {
	*t = Task{
		Type:        p.tt.name,
		Priority:    p.prio,
		MaxAttempts: p.tt.cfg.maxAttempts,
		Headers:     p.msg.Headers(),
		Payload:     p.msg.Data(),
		Stream:      w.parts.Load().StreamOf(p.msg.Subject()), // partitions.go
		subject:     p.msg.Subject(),
		Attempt:     1,
		baseLogger:  w.log,
		worker:      w,
	}
	if pm, ok := p.msg.(*pull.Msg); ok {
		// The worker's own deliveries: read without allocating.
		if d, err := pm.Delivery(); err == nil {
			t.Attempt = int(d.NumDelivered)
			t.Sequence = d.StreamSeq
			t.EnqueuedAt = d.Timestamp
		}
	} else if md, err := p.msg.Metadata(); err == nil {
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
