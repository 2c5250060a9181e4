package framework_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestQueueActivityOldestWaiting(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	names := streams.MustNames("")
	if _, err := topology.EnsureConsumer(ctx, e.js, names, topology.ConsumerSpec{TaskType: "act.a"}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	first := e.enqueue(t, "act.a", nil)
	e.enqueue(t, "act.a", nil)
	// The consumer counts a stored task a moment after the stream
	// acknowledged it: wait until it sees both.
	var a inspect.QueueActivity
	testutil.Wait(t, waitLong, "two tasks waiting", func() bool {
		acts, err := inspect.New(e.cl).QueueActivity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(acts) != 1 {
			t.Fatalf("activity: %+v", acts)
		}
		a = acts[0]
		return a.Waiting == 2
	})
	if a.Type != "act.a" || a.Priority != framework.PriorityNormal || a.Waiting != 2 || a.Delivered != 0 {
		t.Errorf("activity: %+v", a)
	}
	if a.OldestWaiting.Before(before.Add(-time.Second)) || a.OldestWaiting.After(time.Now()) {
		t.Errorf("oldest waiting %v, enqueued after %v", a.OldestWaiting, before)
	}
	// Run the tasks: nothing waits any more and the deliveries count.
	w := e.worker(t)
	done := make(chan string, 2)
	w.HandleFunc("act.a", func(ctx context.Context, task *framework.Task) error {
		done <- task.ID
		return nil
	})
	startWorker(t, w)
	got := map[string]bool{testutil.Recv(t, done, waitLong, "a task"): true}
	got[testutil.Recv(t, done, waitLong, "another task")] = true
	if !got[first.ID] || len(got) != 2 {
		t.Errorf("ran %v, want %s and another", got, first.ID)
	}
	testutil.Wait(t, waitLong, "both acked", func() bool {
		acts, err := inspect.New(e.cl).QueueActivity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a = activityOf(t, acts, "act.a", framework.PriorityNormal)
		return a.Acked == 2
	})
	if a.Waiting != 0 || a.Delivered != 2 || !a.OldestWaiting.IsZero() || a.LastDelivery.IsZero() {
		t.Errorf("after run: %+v", a)
	}
}

func TestScheduledTasksList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	late := e.enqueue(t, "sch.a", nil, framework.In(2*time.Hour), framework.WithID("late"))
	soon := e.enqueue(t, "sch.a", nil, framework.In(time.Hour), framework.WithID("soon"))
	e.enqueue(t, "sch.b", nil, framework.In(time.Hour), framework.WithPriority(framework.PriorityHigh), framework.WithID("other"))
	e.enqueue(t, "sch.a", nil) // not delayed
	ins := inspect.New(e.cl)

	all, trunc, err := ins.ScheduledTasks(ctx, inspect.ScheduledFilter{})
	if err != nil || trunc {
		t.Fatalf("list: %v truncated %v", err, trunc)
	}
	if len(all) != 3 {
		t.Fatalf("got %d scheduled tasks: %+v", len(all), all)
	}
	if all[0].ID != "soon" && all[1].ID != "soon" {
		t.Errorf("due first not first: %+v", all)
	}
	if all[2].ID != "late" || !all[2].ScheduledFor.Equal(late.ScheduledFor) || all[2].Type != "sch.a" || all[2].State != framework.StateScheduled {
		t.Errorf("last: %+v, want late due %v", all[2], late.ScheduledFor)
	}
	onlyA, _, err := ins.ScheduledTasks(ctx, inspect.ScheduledFilter{Type: "sch.a", Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(onlyA) != 1 || onlyA[0].ID != soon.ID {
		t.Errorf("type filter with limit 1: %+v", onlyA)
	}
	if _, _, err := ins.ScheduledTasks(ctx, inspect.ScheduledFilter{Type: "Bad Type"}); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("bad type: %v", err)
	}
}

func TestPauseAndResumeQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ins := inspect.New(e.cl)
	if err := ins.PauseQueue(ctx, "pq.a", framework.PriorityNormal, time.Time{}); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("pause without consumer: %v", err)
	}
	ran := make(chan string, 4)
	w := e.worker(t)
	w.HandleFunc("pq.a", func(ctx context.Context, task *framework.Task) error {
		ran <- task.ID
		return nil
	})
	startWorker(t, w)
	if err := ins.PauseQueue(ctx, "pq.a", framework.PriorityNormal, time.Time{}); err != nil {
		t.Fatal(err)
	}
	stats, err := inspect.New(e.cl).QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range stats.Queues {
		if paused := q.Priority == framework.PriorityNormal; q.Paused != paused || (paused && time.Until(q.PausedUntil) < time.Hour) {
			t.Fatalf("queue %s/%s paused %v until %v", q.Type, q.Priority, q.Paused, q.PausedUntil)
		}
	}
	e.enqueue(t, "pq.a", nil, framework.WithID("held"))
	// The task waits on the paused consumer: it is stored, undelivered.
	testutil.Wait(t, waitLong, "task waiting on the paused queue", func() bool {
		acts, err := ins.QueueActivity(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a := activityOf(t, acts, "pq.a", framework.PriorityNormal)
		return a.Waiting == 1 && a.Paused
	})
	select {
	case id := <-ran:
		t.Fatalf("task %s ran on a paused queue", id)
	default:
	}
	if err := ins.ResumeQueue(ctx, "pq.a", framework.PriorityNormal); err != nil {
		t.Fatal(err)
	}
	id := testutil.Recv(t, ran, waitLong, "task after resume")
	if id != "held" {
		t.Errorf("ran %s", id)
	}
	if err := ins.PauseQueue(ctx, "Bad Type", framework.PriorityNormal, time.Time{}); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("bad type: %v", err)
	}
}

func TestBreakerRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	ins := inspect.New(e.cl)
	recs, err := ins.BreakerRecords(ctx)
	if err != nil || len(recs) != 0 {
		t.Fatalf("without bucket: %v %+v", err, recs)
	}
	w := e.worker(t)
	if _, err := breaker.Install(w, breaker.WithSettings("gateway", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour})); err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("br.a", func(ctx context.Context, task *framework.Task) error {
		return breaker.Call(ctx, "gateway", func(context.Context) error { return errors.New("down") })
	}, breaker.WithDependencies("gateway"), framework.WithMaxAttempts(1))
	startWorker(t, w)
	e.enqueue(t, "br.a", nil)
	testutil.Wait(t, waitLong, "open breaker recorded", func() bool {
		recs, err = ins.BreakerRecords(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(recs) == 1 && recs[0].State == breaker.StateOpen
	})
	if recs[0].Dependency != "gateway" || recs[0].Until.Before(time.Now()) {
		t.Errorf("record: %+v", recs[0])
	}
	// A foreign value in the bucket is skipped, not an error.
	kv, err := e.js.KeyValue(ctx, streams.MustNames("").BreakerBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "junk", []byte("{")); err != nil {
		t.Fatal(err)
	}
	recs, err = ins.BreakerRecords(ctx)
	if err != nil || len(recs) != 1 {
		b, _ := json.Marshal(recs)
		t.Errorf("with junk: %v %s", err, b)
	}
}

func activityOf(t *testing.T, acts []inspect.QueueActivity, typ string, p framework.Priority) inspect.QueueActivity {
	t.Helper()
	for _, a := range acts {
		if a.Type == typ && a.Priority == p {
			return a
		}
	}
	t.Fatalf("no activity of %s/%s in %+v", typ, p, acts)
	return inspect.QueueActivity{}
}
