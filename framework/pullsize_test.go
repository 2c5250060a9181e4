package framework_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestPullResizeKeepsBufferedTasks drains a backlog of 1 ms tasks with the
// default pull size (the 4 slots), which grows once the handler time is
// known. Handlers slower than delivery keep the pull buffer full, and
// resizing replaces the pull iterator: the tasks it had buffered must run
// once, on their first delivery, not come back after the ack wait. With a
// fixed WithPrefetch the fetcher never resizes.
func TestPullResizeKeepsBufferedTasks(t *testing.T) {
	t.Parallel()
	for _, fixed := range []bool{false, true} {
		t.Run(map[bool]string{false: "auto", true: "fixed"}[fixed], func(t *testing.T) {
			t.Parallel()
			const typ, n = "pull.resize", 400
			e := newEnv(t)
			w := e.worker(t, framework.WithConcurrency(4))
			var mu sync.Mutex
			runs := make(map[string]int, n)
			redelivered := 0
			opts := []framework.HandlerOption{framework.WithAckWait(2 * time.Second)}
			if fixed {
				opts = append(opts, framework.WithPrefetch(4))
			}
			w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
				for start := time.Now(); time.Since(start) < time.Millisecond; {
					// Busy: slower than delivery, so the pull buffer fills.
				}
				mu.Lock()
				defer mu.Unlock()
				runs[task.ID]++
				if task.Attempt > 1 {
					redelivered++
				}
				return nil
			}, opts...)
			jobs := make([]framework.TaskSpec, n)
			for i := range jobs {
				jobs[i] = framework.TaskSpec{Type: typ, Payload: i}
			}
			if _, err := e.cl.EnqueueMany(t.Context(), jobs); err != nil {
				t.Fatal(err)
			}
			startWorker(t, w)
			e.waitSettled(t, typ, framework.PriorityNormal)
			// Settled means every delivery was acknowledged. A buffered
			// task lost by a resize would have stayed unacknowledged
			// until the ack wait, then run a second time.
			mu.Lock()
			defer mu.Unlock()
			if len(runs) != n || redelivered > 0 {
				t.Fatalf("%d of %d tasks ran, %d redelivered", len(runs), n, redelivered)
			}
			for id, c := range runs {
				if c != 1 {
					t.Fatalf("task %s ran %d times", id, c)
				}
			}
			resizes := w.PullResizesForTest(typ)
			if fixed && resizes != 0 {
				t.Fatalf("%d resizes with a fixed prefetch", resizes)
			}
			if !fixed && resizes == 0 {
				t.Fatalf("the pull never grew for 1 ms tasks")
			}
		})
	}
}

// TestLowerPrioritiesPullSmallWhileHigherRun checks that a lower priority
// pulls only its default batch while tasks of a higher priority run on the
// worker (up to a second after the last one started), so that a critical
// task is not delivered behind a large pull of low ones; and that it pulls
// large batches again afterwards.
func TestLowerPrioritiesPullSmallWhileHigherRun(t *testing.T) {
	t.Parallel()
	const typ, slots, lows = "pull.compete", 4, 8
	e := newEnv(t)
	w := e.worker(t, framework.WithConcurrency(slots))
	type start struct {
		prio framework.Priority
		at   time.Time
	}
	started := make(chan start, lows+1)
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		at := time.Now()
		for time.Since(at) < time.Millisecond {
			// Busy: slow enough for a pull larger than the slots.
		}
		select {
		case started <- start{task.Priority, at}:
		case <-ctx.Done():
		}
		return nil
	})
	jobs := make([]framework.TaskSpec, lows)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: typ, Payload: i,
			Options: []framework.EnqueueOption{framework.WithPriority(framework.PriorityLow)}}
	}
	if _, err := e.cl.EnqueueMany(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	startWorker(t, w)
	for range lows {
		testutil.Recv(t, started, waitLong, "low task started")
	}
	// The handler time is known: alone, the low priority pulls more than
	// its slots.
	if n := w.PullSizeAtForTest(typ, framework.PriorityLow, time.Now()); n <= slots {
		t.Fatalf("low pull of %d with no higher priority running; want more than %d", n, slots)
	}
	e.enqueue(t, typ, "crit", framework.WithPriority(framework.PriorityCritical))
	crit := testutil.Recv(t, started, waitLong, "critical task started")
	if crit.prio != framework.PriorityCritical {
		t.Fatalf("started a %v task; want the critical one", crit.prio)
	}
	if n := w.PullSizeAtForTest(typ, framework.PriorityLow, crit.at.Add(time.Millisecond)); n > slots {
		t.Fatalf("low pull of %d just after a critical task started; want at most %d", n, slots)
	}
	if n := w.PullSizeAtForTest(typ, framework.PriorityCritical, crit.at.Add(time.Millisecond)); n <= slots {
		t.Fatalf("critical pull of %d; want more than %d (nothing ranks above it)", n, slots)
	}
	if n := w.PullSizeAtForTest(typ, framework.PriorityLow, crit.at.Add(2*time.Second)); n <= slots {
		t.Fatalf("low pull of %d two seconds after the last critical task; want more than %d", n, slots)
	}
}
