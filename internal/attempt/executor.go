package attempt

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/internal/dispatch"
	"github.com/jetflow-io/jetflow/internal/exec"
	"github.com/jetflow-io/jetflow/internal/settle"
)

// Task is what an [Executor] asks of a pending task itself: the marks it
// carries. Its methods are called from the executor's goroutine.
type Task interface {
	comparable
	// Resumed reports whether the task resumes after it was parked (its
	// next attempt is a rerun), and clears that mark.
	Resumed() bool
	// Orphaned reports whether the task, parked, no longer belongs to this
	// worker (the lane it came from moved to another): it is then handed
	// back instead of rerun, for the lane's new owner.
	Orphaned() bool
	// Claim claims the task's settlement; false when it was settled
	// already (handed back at the shutdown deadline).
	Claim() bool
}

// Worker is what an [Executor] needs from the worker, for its pending task
// type P (a pointer; the zero P means "no task"). Its methods are called
// from the executor's goroutine, one task at a time for each P. On the
// path of a task that runs once and succeeds the executor calls Prepare,
// Call, Settling, Settled and Next, in that order.
type Worker[P Task] interface {
	// Prepare readies p's first attempt and returns its due time (zero:
	// due now). It returns false when p was settled or handed back
	// instead (for example a task whose identity cannot be trusted).
	Prepare(p P) (due time.Time, ok bool)
	// Call runs p's handler once, from start, with the attempt's context
	// (a fresh one unless first), and ends the attempt: it returns the
	// attempt's error as settled (a timeout named as such). A panic
	// reaches the executor, which recovers it and calls Panicked instead.
	Call(p P, first bool, start time.Time) error
	// Panicked ends an attempt of p whose handler panicked with r after
	// took, and returns the attempt's error; stack is the panicking
	// goroutine's.
	Panicked(p P, r any, stack []byte, took time.Duration) error
	// Hold reports whether a failed attempt of p (err) is to be rerun in
	// process after d, without spending a delivery.
	Hold(p P, err error) (d time.Duration, ok bool)
	// Settling returns the inputs of p's settlement decision after an
	// attempt that ended with err (nil: it succeeded), and p's message
	// operations that carry the decision out. The executor sets
	// Result.ShuttingDown itself.
	Settling(p P, err error) (settle.Result, settle.Policy, settle.Delivery)
	// Settled reports a settlement carried out on p.
	Settled(p P, s Settlement)
	// HandBack returns p, unfinished, to the server (why is logged),
	// unless it was settled already.
	HandBack(p P, why string)
	// Next gives back p's slot once its attempt is over and returns the
	// task to run next in the caller's goroutine: the next message of p's
	// pull buffer or a task granted the slot (zero P: none).
	Next(p P) P
	// Lend lends the slot of p, set aside for a rerun after d because an
	// attempt failed with cause, and returns the task it was granted to,
	// to run next in the caller's goroutine (zero P: none). p still counts
	// as running (its heartbeats go on), and p.Resumed reports true when
	// it comes back.
	Lend(p P, d time.Duration, cause error) P
	// Requeue queues the parked p for a slot again: its grant brings it
	// back to [Executor.Run].
	Requeue(p P)
	// Withdraw takes p out of the queue; false when it was granted a slot
	// already.
	Withdraw(p P) bool
	// Reclaim takes back the slot the parked p lent and runs p again on an
	// executor, where it hands itself back (the worker stops).
	Reclaim(p P)
}

// Config is an [Executor]'s configuration.
type Config struct {
	// Ctx is the worker's context of handlers: once it is done (the
	// shutdown deadline) a task waiting for its due time is handed back,
	// and a failed attempt is not the task's fault (settle.HandBack).
	// Required.
	Ctx context.Context
	// Stop is closed once the worker stops fetching: a task an extension
	// holds is then handed back rather than parked. Required.
	Stop <-chan struct{}
	// Now is the wall clock that due times are compared with; nil means
	// time.Now.
	Now func() time.Time
	// Yield gives the processor to other goroutines between two tasks;
	// nil means runtime.Gosched.
	Yield func()
	// Counters receives the executor's counts; nil means counts of the
	// executor's own.
	Counters *Counters
}

// Counters are an executor's counts, safe for concurrent use.
type Counters struct {
	// Started counts handler attempts, reruns included.
	Started atomic.Uint64
	// HeldEarly counts tasks that waited for a due time the server fired
	// early.
	HeldEarly atomic.Uint64
	// Panics counts handlers that panicked.
	Panics atomic.Uint64
	// Succeeded, Retried and Failed count settlements: acknowledged
	// (Ack sent), handed back for a retry, failed for good.
	Succeeded, Retried, Failed atomic.Uint64
	// HandedBack counts tasks handed back unfinished at shutdown (the
	// worker adds its own hand-backs).
	HandedBack atomic.Uint64
}

// Settlement is what [Executor.Settle] did with a task.
type Settlement struct {
	// Err is the attempt's error (nil: it succeeded); Took its duration
	// (0 for a task that failed its checks before it ran).
	Err  error
	Took time.Duration
	// Result and Decision are the decision's input and output.
	Result   settle.Result
	Decision settle.Decision
	// Carried is what carrying the decision out did.
	Carried settle.Carried
}

// Finished reports whether the settlement ended the attempt in a way the
// worker reports as an outcome: an Ack or a retry the server was sent, or
// a failure. A task handed back at shutdown, one whose dead letter could
// not be written (it is retried later) and one whose Ack or Nak was not
// sent have no outcome.
func (s Settlement) Finished() bool {
	switch {
	case s.Decision.Action == settle.HandBack || s.Carried.DeadLetterErr != nil:
		return false
	case s.Decision.Action == settle.Fail:
		return true
	}
	return s.Carried.Sent
}

// Executor runs attempts of dispatched tasks and settles them. It is safe
// for concurrent use: each goroutine runs its own task.
type Executor[P Task] struct {
	w   Worker[P]
	cfg Config
	c   *Counters
	// held keeps the timers of parked tasks; due is unpark, bound once.
	held exec.Parking[P]
	due  func(P)
}

// New returns an executor working on w.
func New[P Task](w Worker[P], cfg Config) *Executor[P] {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Yield == nil {
		cfg.Yield = runtime.Gosched
	}
	c := cfg.Counters
	if c == nil {
		c = new(Counters)
	}
	e := &Executor[P]{w: w, cfg: cfg, c: c}
	e.due = e.unpark
	return e
}

// Run is the one way into execution: it runs p, which holds a slot, then,
// in this goroutine, the task the worker gives it next (Worker.Next or,
// after parking p, Worker.Park) until there is none. Between two tasks it
// yields the processor once the handlers it ran used its turn: the
// goroutines bringing the next task (the connection's reader, the fetch
// loop) then run, and a task of a higher priority offered meanwhile gets
// the slot, rather than waiting for Go's 10 ms preemption behind CPU-bound
// handlers.
func (e *Executor[P]) Run(p P) {
	var zero P
	var tn dispatch.Turn
	for p != zero {
		r := e.execute(p)
		if tn.Ran(r.from, r.to) {
			e.cfg.Yield()
		}
		if r.held {
			p = e.park(p, r.hold, r.err)
			continue
		}
		p = e.w.Next(p)
	}
}

// ran is how one execution of a task ended.
type ran struct {
	from, to time.Time // when the handler ran (zero: it did not)
	held     bool      // held for a rerun after hold, failed with err
	hold     time.Duration
	err      error
}

// execute runs one attempt of p and settles it, unless an extension holds
// it (r.held: the caller parks it). A parked task resumes here with a
// fresh handler context, or is handed back if the worker stopped
// meanwhile.
func (e *Executor[P]) execute(p P) (r ran) {
	first := !p.Resumed()
	if !first {
		if e.stopping() {
			e.w.HandBack(p, "worker stopping while the task was held")
			return r
		}
		if p.Orphaned() {
			e.w.HandBack(p, "the task's lane moved to another worker while it was held")
			return r
		}
	} else {
		due, ok := e.w.Prepare(p)
		if !ok || !e.waitDue(p, due) {
			return r
		}
	}
	var err error
	r.from, r.to, err = e.once(p, first)
	if err != nil {
		if d, ok := e.w.Hold(p, err); ok {
			if e.stopping() {
				e.w.HandBack(p, "worker stopping while the task was held")
				return r
			}
			// Rerun in process later without spending a delivery.
			r.held, r.hold, r.err = true, d, err
			return r
		}
	}
	e.Settle(p, err, r.to.Sub(r.from))
	return r
}

// waitDue waits until due, never starting p early: the server may fire a
// schedule slightly before the due time. The due time is on the wall clock
// and timers run on the monotonic one, so the wall clock is read again
// after each wait: one the system slows down (a slewing time daemon) has
// not reached the due time when the timer fires. It returns false when p
// was handed back because the worker's context ended first.
func (e *Executor[P]) waitDue(p P, due time.Time) bool {
	if due.IsZero() {
		return true
	}
	wait := due.Sub(e.cfg.Now())
	if wait <= 0 {
		return true
	}
	e.c.HeldEarly.Add(1)
	for ; wait > 0; wait = due.Sub(e.cfg.Now()) {
		timer := time.NewTimer(wait)
		select {
		case <-timer.C:
		case <-e.cfg.Ctx.Done():
			timer.Stop()
			e.w.HandBack(p, "shutdown before due time")
			return false
		}
	}
	return true
}

// once runs p's handler once and returns its error and when it ran.
func (e *Executor[P]) once(p P, first bool) (from, to time.Time, err error) {
	start := time.Now()
	e.c.Started.Add(1)
	err = e.call(p, first, start)
	return start, start.Add(time.Since(start)), err
}

// call calls the handler, turning a panic into an error.
func (e *Executor[P]) call(p P, first bool, start time.Time) (err error) {
	defer func() {
		if r := recover(); r != nil {
			e.c.Panics.Add(1)
			err = e.w.Panicked(p, r, debug.Stack(), time.Since(start))
		}
	}()
	return e.w.Call(p, first, start)
}

// Settle settles p after an attempt that ended with err (nil: it
// succeeded) after took: it claims the settlement (a task is settled at
// most once), decides ([settle.Decide]), carries the decision out on p's
// delivery ([settle.Carry]), counts it and reports it to the worker
// (Worker.Settled). The worker calls it itself for a task that fails its
// checks before it runs.
func (e *Executor[P]) Settle(p P, err error, took time.Duration) {
	if !p.Claim() {
		return // handed back at the shutdown deadline
	}
	r, pol, del := e.w.Settling(p, err)
	r.ShuttingDown = e.cfg.Ctx.Err() != nil
	d := settle.Decide(r, pol)
	s := Settlement{Err: err, Took: took, Result: r, Decision: d, Carried: settle.Carry(del, d, err)}
	switch {
	case d.Action == settle.HandBack:
		e.c.HandedBack.Add(1) // cancelled by shutdown: not the task's fault
	case s.Carried.DeadLetterErr != nil:
	case d.Action == settle.Ack:
		if s.Carried.Sent {
			e.c.Succeeded.Add(1)
		}
	case d.Action == settle.Fail:
		e.c.Failed.Add(1)
	case d.Action == settle.Retry:
		e.c.Retried.Add(1)
	}
	e.w.Settled(p, s)
}

// Held tasks. A task an extension holds (a breaker, a rate limit, a
// blocked ordering key) is parked: its slot is lent to other tasks (the
// goroutine that ran it goes on with the task the slot is granted to), and
// a timer queues it for a slot again. No goroutine waits for it, so an
// outage that holds thousands of tasks costs a timer each, not a goroutine
// and its stack. A parked task still counts as running, so the heartbeats
// keep it alive and the worker's shutdown waits for it: stopping hands
// every parked task back at once ([Executor.StopParked]).

// park sets p aside for d and returns the task its lent slot was granted
// to, for the caller to run in its place (zero P: none). When the worker
// stopped meanwhile, p is reclaimed at once instead, and hands itself back.
func (e *Executor[P]) park(p P, d time.Duration, cause error) P {
	next := e.w.Lend(p, d, cause)
	if !e.held.Park(p, d, e.due) {
		e.w.Reclaim(p)
	}
	return next
}

// unpark queues the parked task p for a slot once its time is up. A worker
// that stopped meanwhile takes it back (here, or in StopParked, whichever
// withdraws it from the queue).
func (e *Executor[P]) unpark(p P) {
	e.w.Requeue(p)
	if e.stopping() && e.w.Withdraw(p) {
		e.w.Reclaim(p)
	}
}

// StopParked has every parked task reclaimed so that it hands itself back;
// the worker calls it once, after it closed Config.Stop. A task whose timer
// fired already is taken out of the queue here, or, if it is not there
// yet, by its own timer; a task granted a slot already hands itself back
// when it resumes.
func (e *Executor[P]) StopParked() {
	e.held.Stop(func(p P, stopped bool) {
		if stopped || e.w.Withdraw(p) {
			e.w.Reclaim(p)
		}
	})
}

// stopping reports whether the worker stopped fetching.
func (e *Executor[P]) stopping() bool {
	select {
	case <-e.cfg.Stop:
		return true
	default:
		return false
	}
}
