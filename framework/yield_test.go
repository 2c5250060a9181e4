package framework_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestExecutorsYieldBetweenLongTasks checks that an executor running
// CPU-bound handlers back to back gives up the processor between them, so
// that the goroutines bringing the next (perhaps more urgent) task are not
// left waiting for the runtime's preemption.
func TestExecutorsYieldBetweenLongTasks(t *testing.T) {
	const (
		typ   = "yield.busy"
		tasks = 40
		busy  = 200 * time.Microsecond // longer than the executor's turn
	)
	e := newEnv(t)
	w := e.worker(t, framework.WithConcurrency(1))
	var yields atomic.Int64
	w.SetYieldForTest(func() { yields.Add(1) })
	var done atomic.Int64
	all := make(chan struct{})
	w.HandleFunc(typ, func(ctx context.Context, _ *framework.Task) error {
		for start := time.Now(); time.Since(start) < busy; {
			// Busy: a CPU-bound handler.
		}
		if done.Add(1) == tasks {
			close(all)
		}
		return nil
	})
	jobs := make([]framework.TaskSpec, tasks)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: typ, Payload: []byte(`{}`)}
	}
	if _, err := e.cl.EnqueueMany(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	startWorker(t, w)
	testutil.Recv(t, all, waitLong, "all busy tasks done")
	// Every handler used a whole turn: the executor yielded after each one
	// (the count is read after the last handler returned, and the yield of
	// that last task may still be on its way).
	if n := yields.Load(); n < tasks-1 {
		t.Fatalf("executors yielded %d times between %d CPU-bound tasks; want at least %d", n, tasks, tasks-1)
	}
}

// TestIdleWorkerStartsArrivalsDirectly checks that a task reaching an idle
// worker (a free slot, nothing waiting, an empty pull buffer) starts from
// the subscription that received it, not through the fetch loop and the
// scheduler: one goroutine hand-off fewer between the server and the
// handler.
func TestIdleWorkerStartsArrivalsDirectly(t *testing.T) {
	const (
		typ   = "direct.idle"
		tasks = 20
	)
	e := newEnv(t)
	w := e.worker(t, framework.WithConcurrency(4))
	ran := make(chan struct{})
	w.HandleFunc(typ, func(ctx context.Context, _ *framework.Task) error {
		ran <- struct{}{}
		return nil
	})
	startWorker(t, w)
	for i := range tasks {
		if _, err := e.cl.Enqueue(t.Context(), typ, i); err != nil {
			t.Fatal(err)
		}
		testutil.Recv(t, ran, waitLong, "the task running")
		// On a loaded machine the executors may settle late: wait until
		// every slot is free again, so that the next task finds the worker
		// idle.
		testutil.Wait(t, waitLong, "the task's slot released", func() bool { return w.Stats().Running == 0 })
	}
	if n := w.StartedDirectForTest(); n != tasks {
		t.Fatalf("%d of %d tasks sent one at a time to an idle worker started directly", n, tasks)
	}
}
