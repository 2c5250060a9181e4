package attempt_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/attempt"
	"github.com/jetflow-io/jetflow/internal/settle"
)

// task is a pending task of the fake worker: its handler, its next task,
// and what the executor did with it.
type task struct {
	name    string
	due     time.Time
	refuse  bool          // Prepare settles it itself
	handle  func() error  // nil: succeeds
	hold    time.Duration // >0: a failure is held for a rerun
	attempt int           // delivery count (1 if 0)
	max     int           // max attempts (3 if 0)
	next    *task         // what Next returns after it

	resumed  bool
	orphaned bool // Orphaned's answer
	claimed  bool
	ops      []string // message operations, in order
	calls    []bool   // Call's first flag of each attempt
	settled  []attempt.Settlement
	backs    []string // hand-back reasons
	dlErr    error    // DeadLetter's error
	ackErr   error    // Ack's error
	notSent  []string // operations NotSent was told of
}

// fakeWorker is an attempt.Worker over *task that records the order of its
// calls.
type fakeWorker struct {
	mu     sync.Mutex
	events []string
	parked []*task
	// park is returned by Lend.
	park *task
	// queued are the tasks Requeue queued and Withdraw did not take out;
	// requeued and reclaimed receive each task Requeue and Reclaim get.
	queued    map[*task]bool
	requeued  chan *task
	reclaimed chan *task
}

func (w *fakeWorker) event(format string, args ...any) {
	w.mu.Lock()
	w.events = append(w.events, fmt.Sprintf(format, args...))
	w.mu.Unlock()
}

func (p *task) Resumed() bool {
	r := p.resumed
	p.resumed = false
	return r
}

func (p *task) Orphaned() bool { return p.orphaned }

func (p *task) Claim() bool {
	if p.claimed {
		return false
	}
	p.claimed = true
	return true
}

func (w *fakeWorker) Prepare(p *task) (time.Time, bool) {
	w.event("prepare %s", p.name)
	return p.due, !p.refuse
}

func (w *fakeWorker) Call(p *task, first bool, start time.Time) error {
	w.event("call %s", p.name)
	p.calls = append(p.calls, first)
	if p.handle == nil {
		return nil
	}
	return p.handle()
}

func (w *fakeWorker) Panicked(p *task, r any, stack []byte, took time.Duration) error {
	return fmt.Errorf("panic: %v", r)
}

func (w *fakeWorker) Hold(p *task, err error) (time.Duration, bool) {
	return p.hold, p.hold > 0
}

func (w *fakeWorker) Settling(p *task, err error) (settle.Result, settle.Policy, settle.Delivery) {
	n, max := p.attempt, p.max
	if n == 0 {
		n = 1
	}
	if max == 0 {
		max = 3
	}
	r := settle.Result{Failed: err != nil, Attempt: n}
	pol := settle.Policy{MaxAttempts: max, DeadLetters: true,
		Backoff: func(a int) time.Duration { return time.Duration(a) * time.Second }}
	return r, pol, (*delivery)(p)
}

func (w *fakeWorker) Settled(p *task, s attempt.Settlement) {
	w.event("settled %s", p.name)
	p.settled = append(p.settled, s)
}

func (w *fakeWorker) HandBack(p *task, why string) {
	w.event("handback %s", p.name)
	p.backs = append(p.backs, why)
}

func (w *fakeWorker) Next(p *task) *task {
	w.event("next %s", p.name)
	return p.next
}

func (w *fakeWorker) Lend(p *task, d time.Duration, cause error) *task {
	w.event("park %s %v", p.name, d)
	w.mu.Lock()
	w.parked = append(w.parked, p)
	w.mu.Unlock()
	p.resumed = true
	return w.park
}

func (w *fakeWorker) Requeue(p *task) {
	w.mu.Lock()
	if w.queued == nil {
		w.queued = make(map[*task]bool)
	}
	w.queued[p] = true
	w.mu.Unlock()
	if w.requeued != nil {
		w.requeued <- p
	}
}

func (w *fakeWorker) Withdraw(p *task) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	ok := w.queued[p]
	delete(w.queued, p)
	return ok
}

func (w *fakeWorker) Reclaim(p *task) {
	w.event("reclaim %s", p.name)
	if w.reclaimed != nil {
		w.reclaimed <- p
	}
}

// delivery is a task's message operations.
type delivery task

func (d *delivery) Ack() error                         { d.ops = append(d.ops, "ack"); return d.ackErr }
func (d *delivery) Nak() error                         { d.ops = append(d.ops, "nak"); return nil }
func (d *delivery) TermWithReason(reason string) error { d.ops = append(d.ops, "term"); return nil }
func (d *delivery) RetryDelay() time.Duration          { return time.Minute }
func (d *delivery) NotSent(op string, err error)       { d.notSent = append(d.notSent, op) }
func (d *delivery) NakWithDelay(delay time.Duration) error {
	d.ops = append(d.ops, "nak "+delay.String())
	return nil
}
func (d *delivery) DeadLetter(cause error) error {
	d.ops = append(d.ops, "deadletter")
	return d.dlErr
}

// newExecutor returns an executor on w, whose context and stop channel the
// test controls.
func newExecutor(w *fakeWorker, cfg attempt.Config) *attempt.Executor[*task] {
	if cfg.Ctx == nil {
		cfg.Ctx = context.Background()
	}
	if cfg.Stop == nil {
		cfg.Stop = make(chan struct{})
	}
	if cfg.Yield == nil {
		cfg.Yield = func() {}
	}
	return attempt.New[*task](w, cfg)
}

// A successful attempt is acknowledged, counted and reported as finished;
// the loop then runs the task Next gives, in the same call.
func TestRunSettlesAndRunsTheNextTask(t *testing.T) {
	w := &fakeWorker{}
	var c attempt.Counters
	x := newExecutor(w, attempt.Config{Counters: &c})
	b := &task{name: "b", handle: func() error { return errors.New("boom") }}
	a := &task{name: "a", next: b}
	x.Run(a)

	want := []string{"prepare a", "call a", "settled a", "next a", "prepare b", "call b", "settled b", "next b"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events %q, want %q", w.events, want)
	}
	if !slices.Equal(a.ops, []string{"ack"}) || !a.settled[0].Finished() {
		t.Errorf("a: ops %q, finished %v; want an ack, finished", a.ops, a.settled[0].Finished())
	}
	if !slices.Equal(b.ops, []string{"nak 1s"}) || b.settled[0].Decision.Action != settle.Retry {
		t.Errorf("b: ops %q, decision %+v; want a retry after the backoff", b.ops, b.settled[0].Decision)
	}
	if c.Started.Load() != 2 || c.Succeeded.Load() != 1 || c.Retried.Load() != 1 || c.Failed.Load() != 0 {
		t.Errorf("started %d, succeeded %d, retried %d, failed %d; want 2, 1, 1, 0",
			c.Started.Load(), c.Succeeded.Load(), c.Retried.Load(), c.Failed.Load())
	}
}

// A panicking handler does not escape: the attempt fails with Panicked's
// error, which the settlement sees, and the panic is counted.
func TestRunRecoversPanics(t *testing.T) {
	w := &fakeWorker{}
	var c attempt.Counters
	x := newExecutor(w, attempt.Config{Counters: &c})
	p := &task{name: "p", handle: func() error { panic("oops") }}
	x.Run(p)
	if c.Panics.Load() != 1 {
		t.Fatalf("panics %d, want 1", c.Panics.Load())
	}
	if len(p.settled) != 1 || p.settled[0].Err == nil || p.settled[0].Err.Error() != "panic: oops" || p.settled[0].Decision.Action != settle.Retry {
		t.Fatalf("settled %+v, want a retry of the panic's error", p.settled)
	}
}

// A task is settled at most once: a settlement that finds the task
// claimed (handed back at the shutdown deadline) carries nothing out.
func TestSettleAtMostOnce(t *testing.T) {
	w := &fakeWorker{}
	var c attempt.Counters
	x := newExecutor(w, attempt.Config{Counters: &c})
	p := &task{name: "p"}
	x.Settle(p, nil, 0)
	x.Settle(p, errors.New("late"), 0)
	if !slices.Equal(p.ops, []string{"ack"}) || len(p.settled) != 1 || c.Succeeded.Load() != 1 {
		t.Fatalf("ops %q, %d settlements, succeeded %d; want one ack", p.ops, len(p.settled), c.Succeeded.Load())
	}
}

// An Ack the server was not sent is reported to the delivery, and is
// neither a success nor an outcome: the server redelivers the task.
func TestSettleUnsentAck(t *testing.T) {
	w := &fakeWorker{}
	var c attempt.Counters
	x := newExecutor(w, attempt.Config{Counters: &c})
	p := &task{name: "p", ackErr: errors.New("connection closed")}
	x.Settle(p, nil, 0)
	if !slices.Equal(p.notSent, []string{"ack"}) || p.settled[0].Finished() || c.Succeeded.Load() != 0 {
		t.Fatalf("not sent %q, finished %v, succeeded %d; want the ack not sent, not finished, 0",
			p.notSent, p.settled[0].Finished(), c.Succeeded.Load())
	}
}

// A last attempt is dead-lettered, then terminated; when the dead letter
// cannot be written the task is not terminated but handed back after its
// retry delay, and nothing is reported as finished.
func TestSettleDeadLetters(t *testing.T) {
	boom := errors.New("boom")
	w := &fakeWorker{}
	var c attempt.Counters
	x := newExecutor(w, attempt.Config{Counters: &c})

	last := &task{name: "last", attempt: 3}
	x.Settle(last, boom, 0)
	if !slices.Equal(last.ops, []string{"deadletter", "term"}) || !last.settled[0].Finished() || !last.settled[0].Carried.DeadLettered {
		t.Errorf("last: ops %q, settlement %+v; want dead letter then term, finished", last.ops, last.settled[0])
	}

	lost := &task{name: "lost", attempt: 3, dlErr: errors.New("dlq down")}
	x.Settle(lost, boom, 0)
	if !slices.Equal(lost.ops, []string{"deadletter", "nak 1m0s"}) || lost.settled[0].Finished() {
		t.Errorf("lost: ops %q, finished %v; want dead letter, nak after the retry delay, not finished", lost.ops, lost.settled[0].Finished())
	}
	if c.Failed.Load() != 1 {
		t.Errorf("failed %d, want 1 (the dead letter that was not written is no failure)", c.Failed.Load())
	}
}

// Once the worker's context ended, a failed attempt is handed back
// unfinished: not the task's fault, counted, not reported as finished.
func TestSettleHandsBackAtShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := &fakeWorker{}
	var c attempt.Counters
	x := newExecutor(w, attempt.Config{Ctx: ctx, Counters: &c})
	p := &task{name: "p", attempt: 3}
	x.Settle(p, context.Canceled, 0)
	if !slices.Equal(p.ops, []string{"nak"}) || p.settled[0].Finished() || c.HandedBack.Load() != 1 {
		t.Fatalf("ops %q, finished %v, handed back %d; want one nak, not finished, 1", p.ops, p.settled[0].Finished(), c.HandedBack.Load())
	}
}

// A task that Prepare refuses never runs; the loop goes on with Next.
func TestRunSkipsARefusedTask(t *testing.T) {
	w := &fakeWorker{}
	x := newExecutor(w, attempt.Config{})
	x.Run(&task{name: "r", refuse: true})
	want := []string{"prepare r", "next r"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events %q, want %q", w.events, want)
	}
}

// A task is never started before its due time by the wall clock: a timer
// that fires while the wall clock is still early waits again.
func TestRunWaitsForTheDueTime(t *testing.T) {
	due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// The wall clock: 2 ms early, then (the first timer fired, the clock
	// was slowed down) still 1 ms early, then due.
	clock := []time.Time{due.Add(-2 * time.Millisecond), due.Add(-time.Millisecond), due}
	var reads int
	w := &fakeWorker{}
	var c attempt.Counters
	now := func() time.Time {
		w.event("now")
		tm := clock[min(reads, len(clock)-1)]
		reads++
		return tm
	}
	x := newExecutor(w, attempt.Config{Now: now, Counters: &c})
	x.Run(&task{name: "d", due: due})
	want := []string{"prepare d", "now", "now", "now", "call d", "settled d", "next d"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events %q, want %q", w.events, want)
	}
	if c.HeldEarly.Load() != 1 {
		t.Fatalf("held early %d, want 1", c.HeldEarly.Load())
	}
}

// A task waiting for its due time when the worker's context ends is
// handed back without running.
func TestRunHandsBackATaskWaitingAtShutdown(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	w := &fakeWorker{}
	x := newExecutor(w, attempt.Config{Ctx: ctx, Now: func() time.Time {
		cancel() // the deadline passes while the task waits
		return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	}})
	p := &task{name: "d", due: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	x.Run(p)
	if len(p.calls) != 0 || len(p.backs) != 1 || len(p.settled) != 0 {
		t.Fatalf("calls %v, hand-backs %q, settlements %d; want one hand-back only", p.calls, p.backs, len(p.settled))
	}
}

// A failed attempt an extension holds is parked, not settled; the task
// its slot was lent to runs next; the parked task resumes with a rerun
// (Call's first false) and is settled then.
func TestRunParksAHeldTaskAndRerunsIt(t *testing.T) {
	fails := true
	h := &task{name: "h", hold: time.Second, handle: func() error {
		if fails {
			fails = false
			return errors.New("dependency down")
		}
		return nil
	}}
	lent := &task{name: "l"}
	w := &fakeWorker{park: lent}
	x := newExecutor(w, attempt.Config{})
	x.Run(h)
	if len(h.settled) != 0 || len(w.parked) != 1 || len(lent.settled) != 1 {
		t.Fatalf("held task settled %d times, parked %d, lent task settled %d; want 0, 1, 1", len(h.settled), len(w.parked), len(lent.settled))
	}
	x.Run(h) // its timer fired and it got a slot
	if !slices.Equal(h.calls, []bool{true, false}) || !slices.Equal(h.ops, []string{"ack"}) {
		t.Fatalf("calls %v, ops %q; want a first call, then a rerun that was acked", h.calls, h.ops)
	}
	want := []string{"prepare h", "call h", "park h 1s", "prepare l", "call l", "settled l", "next l", "call h", "settled h", "next h"}
	if !slices.Equal(w.events, want) {
		t.Fatalf("events %q, want %q", w.events, want)
	}
}

// A parked task is queued for a slot again once its time is up.
func TestParkedTaskIsRequeuedWhenDue(t *testing.T) {
	w := &fakeWorker{requeued: make(chan *task, 1)}
	x := newExecutor(w, attempt.Config{})
	h := &task{name: "h", hold: time.Millisecond, handle: func() error { return errors.New("down") }}
	x.Run(h)
	select {
	case p := <-w.requeued:
		if p != h {
			t.Fatalf("requeued %s, want h", p.name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the parked task was not requeued")
	}
	x.StopParked() // nothing parked any more: nothing reclaimed
	if slices.Contains(w.events, "reclaim h") {
		t.Fatalf("events %q: a requeued task was reclaimed", w.events)
	}
}

// Stopping hands every parked task back at once: StopParked reclaims it
// (its timer stopped), and a task held after that is reclaimed rather than
// parked.
func TestStopParkedReclaimsParkedTasks(t *testing.T) {
	w := &fakeWorker{reclaimed: make(chan *task, 2)}
	x := newExecutor(w, attempt.Config{})
	fail := func() error { return errors.New("down") }
	h := &task{name: "h", hold: time.Hour, handle: fail}
	x.Run(h)
	x.StopParked()
	if p := nextReclaimed(t, w); p != h {
		t.Fatalf("reclaimed %s, want h", p.name)
	}
	late := &task{name: "late", hold: time.Hour, handle: fail}
	x.Run(late) // Stop is open: parking itself is refused
	if p := nextReclaimed(t, w); p != late {
		t.Fatalf("reclaimed %s, want late", p.name)
	}
}

// nextReclaimed returns the next task w reclaims, failing the test when
// none comes.
func nextReclaimed(t *testing.T, w *fakeWorker) *task {
	t.Helper()
	select {
	case p := <-w.reclaimed:
		return p
	case <-time.After(10 * time.Second):
		t.Fatal("no task was reclaimed")
		return nil
	}
}

// A parked task whose timer fires once the worker stopped fetching is
// taken back out of the queue and reclaimed.
func TestParkedTaskDueWhileStoppingIsReclaimed(t *testing.T) {
	stop := make(chan struct{})
	// Requeue blocks until the test receives, after it closed stop.
	w := &fakeWorker{requeued: make(chan *task), reclaimed: make(chan *task, 1)}
	x := newExecutor(w, attempt.Config{Stop: stop})
	p := &task{name: "p", hold: time.Millisecond, handle: func() error { return errors.New("down") }}
	x.Run(p)
	close(stop)
	<-w.requeued
	if r := nextReclaimed(t, w); r != p {
		t.Fatalf("reclaimed %s, want p", r.name)
	}
	if w.Withdraw(p) {
		t.Fatal("the reclaimed task is still queued")
	}
}

// A held task is handed back, not parked, once the worker stopped
// fetching, and a parked task resuming then is handed back without a
// rerun.
func TestRunHandsBackHeldTasksWhenStopping(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	w := &fakeWorker{}
	x := newExecutor(w, attempt.Config{Stop: stop})
	h := &task{name: "h", hold: time.Second, handle: func() error { return errors.New("down") }}
	x.Run(h)
	if len(w.parked) != 0 || len(h.backs) != 1 || len(h.settled) != 0 {
		t.Fatalf("parked %d, hand-backs %q, settlements %d; want a hand-back only", len(w.parked), h.backs, len(h.settled))
	}
	r := &task{name: "r", resumed: true}
	x.Run(r)
	if len(r.calls) != 0 || len(r.backs) != 1 {
		t.Fatalf("resumed task: calls %v, hand-backs %q; want a hand-back without a rerun", r.calls, r.backs)
	}
}

// A parked task whose lane moved to another worker meanwhile is handed
// back when it resumes, not rerun.
func TestRunHandsBackAnOrphanedHeldTask(t *testing.T) {
	w := &fakeWorker{}
	x := newExecutor(w, attempt.Config{})
	r := &task{name: "r", resumed: true, orphaned: true}
	x.Run(r)
	if len(r.calls) != 0 || len(r.backs) != 1 || len(r.settled) != 0 {
		t.Fatalf("orphaned task: calls %v, hand-backs %q, settlements %d; want a hand-back only", r.calls, r.backs, len(r.settled))
	}
	fresh := &task{name: "f", orphaned: true} // asked of resumed tasks only
	x.Run(fresh)
	if len(fresh.calls) != 1 || len(fresh.backs) != 0 {
		t.Fatalf("first attempt: calls %v, hand-backs %q; want it run", fresh.calls, fresh.backs)
	}
}

// The executor yields the processor between two tasks once its handlers
// ran for dispatch.YieldAfter, not after a task that did not run.
func TestRunYieldsOnceItsTurnIsUsed(t *testing.T) {
	w := &fakeWorker{}
	yields := 0
	x := newExecutor(w, attempt.Config{Yield: func() { yields++ }})
	busy := func() error {
		for start := time.Now(); time.Since(start) < time.Millisecond; {
		}
		return nil
	}
	c := &task{name: "c", refuse: true}
	b := &task{name: "b", handle: busy, next: c}
	x.Run(&task{name: "a", handle: busy, next: b})
	if yields != 2 {
		t.Fatalf("%d yields, want 2 (after a and b, not after c)", yields)
	}
}

// Finished tells the settlements the worker reports as an outcome.
func TestSettlementFinished(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    attempt.Settlement
		want bool
	}{
		{"ack sent", attempt.Settlement{Decision: settle.Decision{Action: settle.Ack}, Carried: settle.Carried{Sent: true}}, true},
		{"ack not sent", attempt.Settlement{Decision: settle.Decision{Action: settle.Ack}}, false},
		{"retry sent", attempt.Settlement{Decision: settle.Decision{Action: settle.Retry}, Carried: settle.Carried{Sent: true}}, true},
		{"retry not sent", attempt.Settlement{Decision: settle.Decision{Action: settle.Retry}}, false},
		{"fail, term not sent", attempt.Settlement{Decision: settle.Decision{Action: settle.Fail}}, true},
		{"dead letter not written", attempt.Settlement{Decision: settle.Decision{Action: settle.Fail},
			Carried: settle.Carried{Sent: true, DeadLetterErr: errors.New("x")}}, false},
		{"handed back", attempt.Settlement{Decision: settle.Decision{Action: settle.HandBack}, Carried: settle.Carried{Sent: true}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.s.Finished(); got != tc.want {
				t.Fatalf("Finished() = %v, want %v", got, tc.want)
			}
		})
	}
}
