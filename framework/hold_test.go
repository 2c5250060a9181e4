package framework_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// errHeld is the error the hold plugin of these tests holds.
var errHeld = errors.New("held by the test")

// useHold installs a plugin holding every attempt that fails with errHeld
// for d.
func useHold(w *framework.Worker, d time.Duration) {
	w.Use(framework.Plugin{Name: "test-hold", Hold: func(_ *framework.Task, err error) (time.Duration, bool) {
		return d, errors.Is(err, errHeld)
	}})
}

// holdingWorker starts a worker of concurrency 4 whose handler of
// taskType records each call in seen and fails with errHeld, held for d
// every time. The test shuts it down itself.
func (e *env) holdingWorker(t *testing.T, taskType string, d time.Duration, seen *calls) *framework.Worker {
	t.Helper()
	w := e.worker(t, framework.WithConcurrency(4))
	useHold(w, d)
	w.HandleFunc(taskType, func(_ context.Context, task *framework.Task) error {
		seen.add(task.ID)
		return errHeld
	})
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return w
}

// calls counts a handler's calls per task ID.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = make(map[string]int)
	}
	c.n[id]++
	return c.n[id]
}

func (c *calls) tasks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.n)
}

// TestParkedTasksKeepNoGoroutine holds 400 tasks on a worker of
// concurrency 4 (an outage of the dependency they all need): a held task
// keeps no goroutine, so the process's goroutines do not grow with them.
// Shutdown hands every one back at once, and another worker runs them all.
// Not parallel: it counts the process's goroutines.
func TestParkedTasksKeepNoGoroutine(t *testing.T) {
	e := newEnv(t)
	const n = 400
	var seen calls
	w := e.holdingWorker(t, "hold.outage", time.Hour, &seen)
	// The first tasks held, the worker's services all run: count from there.
	const first = 8
	for i := range first {
		e.enqueue(t, "hold.outage", i)
	}
	testutil.Wait(t, waitLong, "the first tasks held", func() bool { return seen.tasks() == first })
	before := runtime.NumGoroutine()
	jobs := make([]framework.TaskSpec, n-first)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: "hold.outage", Payload: first + i}
	}
	if _, err := e.cl.EnqueueMany(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "every task held", func() bool { return seen.tasks() == n })
	during := runtime.NumGoroutine()
	t.Logf("goroutines: %d with %d tasks held, %d with %d", before, first, during, n)
	if during-before > n/4 {
		t.Fatalf("goroutines grew from %d to %d with %d tasks held: a held task keeps a goroutine", before, during, n)
	}

	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown with held tasks: %v", err)
	}
	// A task the draining pull buffer hands back may come back to it
	// and be handed back again: the count is of hand-backs.
	if got := w.Stats().HandedBack; got < n {
		t.Fatalf("handed back %d tasks, want the %d held", got, n)
	}
	e.runHandedBack(t, "hold.outage", n)
}

// runHandedBack runs the n tasks of taskType that a stopped worker handed
// back on a new worker, and checks that each runs once.
func (e *env) runHandedBack(t *testing.T, taskType string, n int) {
	t.Helper()
	var ran calls
	w := e.worker(t, framework.WithConcurrency(8))
	w.HandleFunc(taskType, func(_ context.Context, task *framework.Task) error {
		ran.add(task.ID)
		return nil
	})
	startWorker(t, w)
	testutil.Wait(t, waitLong, "the handed back tasks ran", func() bool { return ran.tasks() == n })
	e.waitSettled(t, taskType, framework.PriorityNormal)
	if s := w.Stats(); s.Succeeded != uint64(n) {
		t.Fatalf("the second worker ran %d tasks, want each of the %d once", s.Succeeded, n)
	}
}

// TestParkedTaskResumes holds each task twice for a moment: it reruns in
// process on its first delivery (attempt 1) and succeeds, while other
// tasks use its slot.
func TestParkedTaskResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 60
	var seen calls
	var maxAttempt, succeeded atomic.Int64
	w := e.worker(t, framework.WithConcurrency(2))
	useHold(w, 5*time.Millisecond)
	w.HandleFunc("hold.resume", func(_ context.Context, task *framework.Task) error {
		if task.Attempt > 1 {
			maxAttempt.Store(int64(task.Attempt))
		}
		if seen.add(task.ID) <= 2 {
			return errHeld
		}
		succeeded.Add(1)
		return nil
	})
	startWorker(t, w)
	for i := range n {
		e.enqueue(t, "hold.resume", i)
	}
	testutil.Wait(t, waitLong, "every task succeeded", func() bool { return succeeded.Load() == n })
	e.waitSettled(t, "hold.resume", framework.PriorityNormal)
	if a := maxAttempt.Load(); a != 0 {
		t.Fatalf("a held task came back as attempt %d: holding spent a delivery", a)
	}
	if s := w.Stats(); s.Started != 3*n || s.Succeeded != n {
		t.Fatalf("stats %+v: want %d attempts started, %d succeeded", s, 3*n, n)
	}
}

// TestShutdownWhileTasksBounce stops a worker whose tasks are held for a
// millisecond at every attempt, so that parking, resuming and the shutdown
// race: Shutdown returns before its deadline with every task handed back,
// none left running or stuck in the scheduler, and another worker runs
// them all.
func TestShutdownWhileTasksBounce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 50
	var seen calls
	w := e.holdingWorker(t, "hold.bounce", time.Millisecond, &seen)
	for i := range n {
		e.enqueue(t, "hold.bounce", i)
	}
	testutil.Wait(t, waitLong, "every task held", func() bool { return seen.tasks() == n })
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if s := w.Stats(); s.HandedBack < n || s.Succeeded+s.Failed+s.Retried != 0 {
		t.Fatalf("stats %+v: want the %d tasks handed back and none settled", s, n)
	}
	e.runHandedBack(t, "hold.bounce", n)
}
