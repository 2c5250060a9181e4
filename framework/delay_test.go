package framework_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

type startRecord struct {
	id           string
	start        time.Time
	scheduledFor time.Time
	enqueuedAt   time.Time
}

// recordStarts registers a handler of typ that reports every start on the
// returned channel.
func recordStarts(w *framework.Worker, typ string) <-chan startRecord {
	ch := make(chan startRecord, 64)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		ch <- startRecord{id: task.ID, start: time.Now(), scheduledFor: task.ScheduledFor, enqueuedAt: task.EnqueuedAt}
		return nil
	})
	return ch
}

func TestDelayedTasksNeverStartEarly(t *testing.T) {
	t.Parallel()
	const typ = "delay.run"
	e := newEnv(t)
	w := e.worker(t)
	starts := recordStarts(w, typ)
	startWorker(t, w)

	before := time.Now()
	at := before.Add(1300 * time.Millisecond).Round(0)
	infos := map[string]framework.TaskInfo{
		"in": e.enqueue(t, typ, nil, framework.WithID("in"), framework.In(time.Second)),
		// Sub-second parts must be kept: a due time rounded to whole
		// seconds could fire up to 1 s early.
		"at":  e.enqueue(t, typ, nil, framework.WithID("at"), framework.At(at)),
		"now": e.enqueue(t, typ, nil, framework.WithID("now")),
	}
	if !infos["at"].ScheduledFor.Equal(at) {
		t.Errorf("At: TaskInfo.ScheduledFor = %v, want %v", infos["at"].ScheduledFor, at)
	}
	if d := infos["in"].ScheduledFor.Sub(before); d < time.Second || d > 2*time.Second {
		t.Errorf("In(1s): TaskInfo.ScheduledFor is %v after the call", d)
	}
	if infos["in"].Subject != "jetflow.delay.in" || infos["now"].Subject != "jetflow.task.normal.delay.run" {
		t.Errorf("subjects: in %q, now %q", infos["in"].Subject, infos["now"].Subject)
	}
	if !infos["now"].ScheduledFor.IsZero() {
		t.Errorf("immediate task has ScheduledFor %v", infos["now"].ScheduledFor)
	}

	seen := map[string]startRecord{}
	for range len(infos) {
		r := testutil.Recv(t, starts, waitLong, "delayed task start")
		if _, dup := seen[r.id]; dup {
			t.Fatalf("task %s started twice", r.id)
		}
		seen[r.id] = r
	}
	for id, r := range seen {
		info := infos[id]
		if !r.scheduledFor.Equal(info.ScheduledFor) {
			t.Errorf("%s: Task.ScheduledFor = %v, TaskInfo.ScheduledFor = %v", id, r.scheduledFor, info.ScheduledFor)
		}
		if r.enqueuedAt.Before(before.Add(-time.Second)) || r.enqueuedAt.After(time.Now()) {
			t.Errorf("%s: EnqueuedAt %v not around the enqueue at %v", id, r.enqueuedAt, before)
		}
		if id == "now" {
			continue
		}
		late := r.start.Sub(r.scheduledFor)
		t.Logf("%s: started %v after its due time", id, late)
		if late < 0 {
			t.Errorf("%s started %v before its due time", id, -late)
		}
		if late > time.Second {
			t.Errorf("%s started %v after its due time, want within 1s", id, late)
		}
	}
	// A start is recorded before its handler returns: wait for the acks.
	testutil.Wait(t, waitLong, "three tasks acknowledged", func() bool { return w.Stats().Succeeded >= 3 })
	if got := w.Stats().Succeeded; got != 3 {
		t.Errorf("Stats.Succeeded = %d, want 3", got)
	}
}

func TestCancelDelayedTask(t *testing.T) {
	t.Parallel()
	const typ = "delay.cancel"
	e := newEnv(t)
	w := e.worker(t)
	starts := recordStarts(w, typ)
	startWorker(t, w)
	ctx := t.Context()

	// Due in an hour: the cancel always comes first, however slow the
	// machine. That the cancelled schedule can never fire is shown by the
	// stream itself: nothing of it is left.
	e.enqueue(t, typ, nil, framework.WithID("doomed"), framework.In(time.Hour))
	testutil.Wait(t, waitLong, "the delayed task moved into its schedule", func() bool { return w.Stats().DelaysMoved == 1 })
	if n := e.taskStreamMsgs(t); n != 1 {
		t.Fatalf("task stream holds %d messages after a delayed enqueue, want 1", n)
	}
	if err := e.cl.Cancel(ctx, "doomed"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if err := e.cl.Cancel(ctx, "doomed"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("second Cancel: %v, want ErrNotFound", err)
	}
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Fatalf("task stream holds %d messages after Cancel, want 0", n)
	}
	e.enqueue(t, typ, nil, framework.WithID("witness"), framework.In(100*time.Millisecond))
	r := testutil.Recv(t, starts, waitLong, "witness start")
	if r.id != "witness" {
		t.Fatalf("cancelled task %s ran", r.id)
	}
	e.waitSettled(t, typ, framework.PriorityNormal)
	select {
	case r := <-starts:
		t.Fatalf("unexpected start of %s", r.id)
	default:
	}
	// The consumer can report the witness acknowledged a moment before the
	// work-queue stream has removed it: wait for the stream itself.
	testutil.Wait(t, waitLong, "an empty task stream", func() bool { return e.taskStreamMsgs(t) == 0 })
	// A schedule that already fired cannot be cancelled.
	if err := e.cl.Cancel(ctx, "witness"); !errors.Is(err, framework.ErrNotFound) {
		t.Errorf("Cancel of a task that ran: %v, want ErrNotFound", err)
	}
}

// A delayed task cancelled before any worker moved it into the schedule
// stream never runs: Cancel purges it from the delay stream.
func TestCancelBeforeTheMove(t *testing.T) {
	t.Parallel()
	const typ = "delay.unmoved"
	e := newEnv(t)
	ctx := t.Context()
	e.enqueue(t, typ, nil, framework.WithID("doomed"), framework.In(200*time.Millisecond))
	rec, err := e.cl.Inspector().GetTask(ctx, "doomed")
	if err != nil || rec.State != framework.StateScheduled || rec.Type != typ {
		t.Fatalf("GetTask before the move: %+v, %v; want scheduled %s", rec, err, typ)
	}
	if err := e.cl.Cancel(ctx, "doomed"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Fatalf("streams hold %d messages after Cancel, want 0", n)
	}
	w := e.worker(t)
	starts := recordStarts(w, typ)
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("witness"), framework.In(200*time.Millisecond))
	if r := testutil.Recv(t, starts, waitLong, "witness start"); r.id != "witness" {
		t.Fatalf("cancelled task %s ran", r.id)
	}
	if got := w.Stats().DelaysMoved; got != 1 {
		t.Errorf("Stats.DelaysMoved = %d, want 1 (the witness only)", got)
	}
}

func TestCancelUnknownAndInvalidID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	err := e.cl.Cancel(t.Context(), "never-enqueued")
	if !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("Cancel(unknown) = %v, want ErrNotFound", err)
	}
	err = e.cl.Cancel(t.Context(), "bad.id")
	if !errors.Is(err, framework.ErrInvalidID) {
		t.Fatalf("Cancel(bad.id) = %v, want ErrInvalidID", err)
	}
}

// TestDelayedTaskWaitsForASlowWallClock runs a worker whose wall clock
// runs at half speed, as one a time daemon slews back does: the wait for a
// delayed task's due time is on a timer (the monotonic clock), so a single
// wait ends before the wall clock reaches the due time. The worker reads
// the wall clock again after each wait and starts the task only once it is
// due.
func TestDelayedTaskWaitsForASlowWallClock(t *testing.T) {
	t.Parallel()
	const typ = "delay.slowclock"
	e := newEnv(t)
	w := e.worker(t)
	base := time.Now()
	slow := func() time.Time { return base.Add(time.Since(base) / 2) }
	w.SetWallClockForTest(slow)
	started := make(chan time.Time, 1)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		started <- slow()
		return nil
	})
	startWorker(t, w)
	info := e.enqueue(t, typ, nil, framework.In(300*time.Millisecond))
	at := testutil.Recv(t, started, waitLong, "the delayed task's start")
	if at.Before(info.ScheduledFor) {
		t.Fatalf("started %v before its due time on the worker's wall clock", info.ScheduledFor.Sub(at))
	}
	if st := w.Stats(); st.HeldEarly != 1 {
		t.Errorf("Stats.HeldEarly = %d, want 1 (the task was held once, however many waits it took)", st.HeldEarly)
	}
}
