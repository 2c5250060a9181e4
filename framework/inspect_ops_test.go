package framework_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func findQueue(o *inspect.Overview, typ string, p framework.Priority) *inspect.QueueOverview {
	for i := range o.Queues {
		if o.Queues[i].Type == typ && o.Queues[i].Priority == p {
			return &o.Queues[i]
		}
	}
	return nil
}

// TestInspectorOverviewAndListTasks drives one queue through the states an
// operator looks at: a stranded backlog, a delayed task, a task retrying
// after a failure and a dead letter, and checks what Overview, ListTasks and
// FindTask report at each point.
func TestInspectorOverviewAndListTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	in := inspect.New(e.cl)

	// Two waiting tasks no worker serves yet: stranded.
	first := e.enqueue(t, "reports.build", map[string]string{"n": "1"})
	e.enqueue(t, "reports.build", map[string]string{"n": "2"})
	due := time.Now().Add(time.Hour)
	delayed := e.enqueue(t, "reports.build", map[string]string{"n": "later"}, framework.At(due))

	o, err := in.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q := findQueue(o, "reports.build", framework.PriorityNormal)
	if q == nil || !q.Stranded || q.Waiting != 2 || q.Scheduled != 1 || q.Consumer != "" {
		t.Fatalf("stranded queue: %+v", q)
	}
	if age := time.Since(q.OldestWaiting); q.OldestWaiting.IsZero() || age < 0 || age > time.Minute {
		t.Errorf("oldest waiting %v", q.OldestWaiting)
	}
	// No worker runs: the delayed task waits in the delay stream, listed
	// after the task stream and the schedule stream.
	if len(o.Streams) < 3 || o.Streams[0].Name != "JETFLOW_TASKS" || o.Streams[0].Messages != 2 ||
		o.Streams[1].Name != "JETFLOW_SCHEDULES" || o.Streams[1].Messages != 0 ||
		o.Streams[2].Name != "JETFLOW_DELAYS" || o.Streams[2].Messages != 1 {
		t.Errorf("streams %+v, want the task stream with 2 messages and the delay stream with 1", o.Streams)
	}

	sched, err := in.ListTasks(ctx, inspect.TaskFilter{State: framework.StateScheduled})
	if err != nil {
		t.Fatal(err)
	}
	if len(sched) != 1 || sched[0].ID != delayed.ID || sched[0].Type != "reports.build" ||
		!sched[0].DueAt.Equal(delayed.ScheduledFor) || sched[0].State != framework.StateScheduled {
		t.Fatalf("scheduled tasks: %+v (want %s due %v)", sched, delayed.ID, delayed.ScheduledFor)
	}
	waiting, err := in.ListTasks(ctx, inspect.TaskFilter{Type: "reports.build"})
	if err != nil {
		t.Fatal(err)
	}
	if len(waiting) != 2 || waiting[0].ID != first.ID || waiting[0].State != framework.StatePending {
		t.Fatalf("waiting tasks: %+v", waiting)
	}
	if none, err := in.ListTasks(ctx, inspect.TaskFilter{Type: "reports.build", Priorities: []framework.Priority{framework.PriorityLow}}); err != nil || len(none) != 0 {
		t.Fatalf("low-priority tasks: %+v, %v", none, err)
	}
	d, err := in.FindTask(ctx, first.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d.State != framework.StatePending || string(d.Payload) != `{"n":"1"}` || d.Type != "reports.build" {
		t.Fatalf("find waiting task: %+v payload %s", d.TaskSummary, d.Payload)
	}
	if d, err := in.FindTask(ctx, delayed.ID); err != nil || d.State != framework.StateScheduled || !d.DueAt.Equal(delayed.ScheduledFor) {
		t.Fatalf("find delayed task: %+v, %v", d, err)
	}
	if _, err := in.FindTask(ctx, "nope"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("find unknown task: %v", err)
	}

	// A worker: task 1 fails once and waits an hour for its retry; task 2
	// fails permanently (dead letter).
	var calls atomic.Int32
	w := e.worker(t)
	w.HandleFunc("reports.build", func(ctx context.Context, tk *framework.Task) error {
		calls.Add(1)
		if string(tk.Payload) == `{"n":"1"}` {
			return framework.RetryAfterErr(time.Hour, errors.New("upstream 503"))
		}
		return framework.Permanent(errors.New("bad report"))
	})
	startWorker(t, w)
	testutil.Wait(t, waitLong, "a retrying task and a dead letter", func() bool {
		o, err = in.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		q = findQueue(o, "reports.build", framework.PriorityNormal)
		return q != nil && q.Running == 1 && q.Waiting == 0 && o.Dead["reports.build"] == 1
	})
	if q.Stranded || q.Consumer == "" || q.Dead != 1 || o.DeadTotal != 1 || !q.OldestWaiting.IsZero() {
		t.Fatalf("served queue: %+v", q)
	}
	var retrying []inspect.TaskSummary
	testutil.Wait(t, waitLong, "the failure recorded", func() bool {
		retrying, err = in.ListTasks(ctx, inspect.TaskFilter{State: framework.StateRetrying})
		if err != nil {
			t.Fatal(err)
		}
		return len(retrying) == 1
	})
	if r := retrying[0]; r.ID != first.ID || r.State != framework.StateRetrying || r.Attempt != 1 || !strings.HasSuffix(r.LastError, "upstream 503") {
		t.Fatalf("retrying: %+v", r)
	}
	if d, err := in.FindTask(ctx, first.ID); err != nil || d.State != framework.StateRetrying || !strings.HasSuffix(d.LastError, "upstream 503") {
		t.Fatalf("find retrying task: %+v, %v", d, err)
	}
	if w, err := in.ListTasks(ctx, inspect.TaskFilter{}); err != nil || len(w) != 0 {
		t.Fatalf("waiting after delivery: %+v, %v", w, err)
	}
	if _, err := in.ListTasks(ctx, inspect.TaskFilter{State: framework.StateSucceeded}); !errors.Is(err, framework.ErrInvalidOption) {
		t.Fatalf("listing succeeded tasks: %v", err)
	}
}

// TestInspectorPauseResume pauses a served type: tasks enqueued meanwhile
// wait, the overview says paused, and they run after Resume. A priority
// paused before any worker exists stays paused when a worker starts.
func TestInspectorPauseResume(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	in := inspect.New(e.cl)

	if _, err := in.PauseType(ctx, "emails.send", time.Time{}); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("pause without consumers: %v", err)
	}
	paused, err := in.PauseType(ctx, "emails.send", time.Time{}, framework.PriorityLow)
	if err != nil {
		t.Fatal(err)
	}
	if len(paused) != 1 || paused[0] != streams.MustNames("").ConsumerName("emails.send", framework.PriorityLow) {
		t.Fatalf("paused %v", paused)
	}
	done := make(chan string, 4)
	w := e.worker(t)
	w.HandleFunc("emails.send", func(ctx context.Context, tk *framework.Task) error {
		done <- string(tk.Payload)
		return nil
	}, framework.WithServedPriorities(framework.PriorityLow))
	startWorker(t, w)
	e.enqueue(t, "emails.send", "hello", framework.WithPriority(framework.PriorityLow))
	testutil.Wait(t, waitLong, "the task delivered to nobody", func() bool {
		o, err := in.Overview(ctx)
		if err != nil {
			t.Fatal(err)
		}
		q := findQueue(o, "emails.send", framework.PriorityLow)
		return q != nil && q.Paused && q.Waiting == 1 && q.PausedUntil.After(time.Now().Add(time.Hour))
	})
	select {
	case p := <-done:
		t.Fatalf("task %s ran while paused", p)
	default:
	}
	resumed, err := in.ResumeType(ctx, "emails.send")
	if err != nil || len(resumed) != 1 {
		t.Fatalf("resume: %v %v", resumed, err)
	}
	if got := testutil.Recv(t, done, waitLong, "task after resume"); got != `"hello"` {
		t.Fatalf("ran %s", got)
	}
	if _, err := in.ResumeType(ctx, "nobody.here"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("resume unknown type: %v", err)
	}
}

// TestScheduleLastFire checks the wrapper; internal/taskmsg tests the
// computation.
func TestScheduleLastFire(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 10, 30, 0, 0, time.UTC)
	info := schedule.Info{Spec: "0 0 * * * *", Stored: now.Add(-2 * time.Hour), Next: now.Add(30 * time.Minute)}
	if got, want := info.LastFire(now), now.Add(-30*time.Minute); !got.Equal(want) {
		t.Fatalf("LastFire = %v, want %v", got, want)
	}
}
