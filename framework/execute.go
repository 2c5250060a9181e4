package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/jetflow-io/jetflow/internal/dispatch"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/settle"
	"github.com/jetflow-io/jetflow/internal/taskctx"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/textcut"
)

// Execution: a dispatched task waits for its due time, runs its handler
// (in-process reruns while a breaker holds it), and is settled: the decision
// is internal/settle's, carried out here.

// run executes p, then, in this goroutine (no hand-off to another
// executor), the next message of p's pull buffer when nothing waits for the
// slot (takeBuffered), or the fetched task that releasing the slot grants.
// A task an extension holds is parked (hold.go) and the fetched task its
// lent slot is granted to runs next. Between two tasks it yields the
// processor once its turn is used (yield.go).
func (w *Worker) run(p *pending) {
	var tn dispatch.Turn
	for p != nil {
		hold, held := w.execute(p)
		if tn.Ran(p.ranFrom, p.ranTo) {
			w.yield()
		}
		if held {
			p = w.park(p, hold)
			continue
		}
		q := w.takeBuffered(p)
		if q == nil {
			q = w.releaseNext(p)
		}
		p = q
	}
}

// execute runs one attempt of p and settles its outcome, unless an
// extension holds it for a rerun in process after hold (held: the caller
// parks it). The caller releases its slot. A parked task resumes here
// (p.rerun) with a fresh handler context.
func (w *Worker) execute(p *pending) (hold time.Duration, held bool) {
	t := &p.task
	first := !p.rerun
	if p.rerun {
		p.rerun = false
		if w.stopping() {
			w.handBack(p, "worker stopping while the task was held")
			return 0, false
		}
	} else if !w.prepare(p) {
		return 0, false
	}
	base := &p.base
	took, err := w.runOnce(base, p, t, first)
	if err != nil && !IsPermanent(err) {
		if d, ok := w.holdFor(t, err); ok {
			if w.stopping() {
				w.handBack(p, "worker stopping while the task was held")
				return 0, false
			}
			// Rerun in process later without spending a delivery;
			// heartbeats keep the task alive meanwhile, and its slot
			// serves other tasks.
			t.Logger().Info("jetflow task held in process", slog.Any(LogKeyError, err), slog.Duration("rerun_in", d))
			return d, true
		}
	}
	w.settle(base, t, p, err, took)
	return 0, false
}

// prepare readies the first attempt of p: it fills its task, fails it for
// good when its due time cannot be trusted, and waits for a due time the
// server fired early. It returns false when p was settled or handed back
// instead.
func (w *Worker) prepare(p *pending) bool {
	t := &p.task
	w.fillTask(t, p)

	// The heartbeat sweeper keeps the task alive while it waits for its
	// time or runs (heartbeats.go).

	// A due time that cannot be trusted fails the task for good rather than
	// holding a slot until a bogus time.
	if err := checkDelivered(t, p.msg); err != nil {
		w.settle(w.hardCtx, t, p, err, 0)
		return false
	}
	// A payload version the handler does not accept goes back to the
	// queue, for a worker that does (versions.go).
	if w.checkPayloadVersion(p) {
		return false
	}
	// Never start early: the server may fire a schedule slightly before the
	// due time. The due time is on the wall clock and timers run on the
	// monotonic one, so the wall clock is read again after each wait: one
	// the system slows down (a slewing time daemon) has not reached the due
	// time when the timer fires.
	if wait := w.untilDue(t); wait > 0 {
		w.stats.heldEarly.Add(1)
		for ; wait > 0; wait = w.untilDue(t) {
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-w.hardCtx.Done():
				timer.Stop()
				w.handBack(p, "shutdown before due time")
				return false
			}
		}
	}
	p.base = taskCtx{Context: w.hardCtx, Key: taskctx.Key{}, Val: t}
	return true
}

// untilDue is how long t's due time is ahead of the wall clock (0 or less
// for an immediate task or one that is due).
func (w *Worker) untilDue(t *Task) time.Duration {
	if t.ScheduledFor.IsZero() {
		return 0
	}
	if w.wallHook != nil {
		return t.ScheduledFor.Sub(w.wallHook())
	}
	return time.Until(t.ScheduledFor)
}

// runOnce runs the handler once with the type's timeout (handlerctx.go).
// The first attempt's context is p's own; a rerun gets a fresh one, since a
// handler may keep its context after it returned.
func (w *Worker) runOnce(base context.Context, p *pending, t *Task, first bool) (time.Duration, error) {
	cfg := &p.tt.cfg
	start := time.Now()
	var ctx *handlerCtx
	if first {
		ctx = &p.first
	} else {
		ctx = new(handlerCtx)
	}
	ctx.Init(base, taskctx.Key{}, t, start, cfg.timeout, ErrHandlerTimeout)
	defer ctx.End()
	w.stats.started.Add(1)
	w.lastStart.Stamp(p.prio.Rank(), start) // pullsize.go
	w.emitStarted(ctx, t)
	err := w.call(ctx, p.tt.handler, t)
	took := time.Since(start)
	p.ranFrom, p.ranTo = start, start.Add(took)
	p.tt.pace.Observe(took)
	if err != nil && ctx.TimedOut() && !errors.Is(err, ErrHandlerTimeout) {
		err = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, cfg.timeout, err)
	}
	return took, err
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, h Handler, t *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := debug.Stack()
			w.stats.panics.Add(1)
			t.Logger().Error("jetflow handler panicked", slog.Any("panic", r), slog.String("stack", string(stack)))
			err = fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	return h.Handle(ctx, t)
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

// settle decides what to do with t after its attempt ended with err and
// carries it out (internal/settle), then counts, logs and reports it.
func (w *Worker) settle(ctx context.Context, t *Task, p *pending, err error, took time.Duration) {
	if !p.settled.CompareAndSwap(false, true) {
		return // handed back at the shutdown deadline
	}
	r := classify(err, t.Attempt)
	r.ShuttingDown = w.hardCtx.Err() != nil
	d := settle.Decide(r, settle.Policy{MaxAttempts: t.MaxAttempts, Backoff: p.tt.cfg.backoff.Delay,
		DeadLetters: w.deadLetter != nil})
	c := settle.Carry((*delivery)(p), d, err)
	o := Outcome{Err: err, Took: took, Delay: d.Delay, Panicked: errors.Is(err, ErrPanic), DeadLettered: c.DeadLettered}
	switch {
	case d.Action == settle.HandBack:
		// Cancelled by shutdown: not the task's fault.
		w.stats.handedBack.Add(1)
		return
	case c.DeadLetterErr != nil:
		t.Logger().Error("jetflow could not dead-letter task; retrying it later", slog.Any(LogKeyError, c.DeadLetterErr),
			slog.Any("cause", err), slog.Duration("retry_in", c.Delay))
		return
	case d.Action == settle.Ack:
		if !c.Sent {
			return
		}
		w.stats.succeeded.Add(1)
		o.Action = ActionAck
	case d.Action == settle.Fail:
		w.stats.failed.Add(1)
		if r.Permanent {
			t.Logger().Error("jetflow task failed permanently; not retried", slog.Any(LogKeyError, err))
		} else {
			t.Logger().Error("jetflow task failed on its last attempt", slog.Any(LogKeyError, err), slog.Int("max_attempts", t.MaxAttempts))
		}
		o.Action = ActionFail
	case d.Action == settle.Retry:
		w.stats.retried.Add(1)
		t.Logger().Warn("jetflow task failed; will retry", slog.Any(LogKeyError, err), slog.Duration("retry_in", d.Delay))
		if !c.Sent {
			return
		}
		o.Action = ActionRetry
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
