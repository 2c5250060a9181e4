package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestShutdownLosesNothing runs without t.Parallel so that it can check for
// leaked goroutines of its own.
func TestShutdownLosesNothing(t *testing.T) {
	leaks := goleak.IgnoreCurrent()
	// Registered first, so it runs last: after workers, connections and the
	// server were closed.
	t.Cleanup(func() { goleak.VerifyNone(t, leaks) })

	const typ = "shutdown.work"
	const concurrency = 4
	e := newEnv(t)

	// Worker A: two quick tasks that finish during shutdown, two stuck
	// tasks that only return when their context is cancelled, and a
	// backlog that never gets a slot.
	recA := newRecorder()
	a := e.worker(t, framework.WithConcurrency(concurrency), framework.WithHooks(recA.hooks()))
	releaseQuick := make(chan struct{})
	stuckCause := make(chan error, concurrency)
	a.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		switch {
		case strings.HasPrefix(task.ID, "quick"):
			<-releaseQuick
			return nil
		case strings.HasPrefix(task.ID, "stuck"):
			<-ctx.Done()
			stuckCause <- context.Cause(ctx)
			return ctx.Err()
		}
		t.Errorf("task %s started on the stopping worker", task.ID)
		return nil
	})
	ids := []string{"quick0", "quick1", "stuck0", "stuck1"}
	for i := range 6 {
		ids = append(ids, fmt.Sprintf("backlog%d", i))
	}
	for _, id := range ids {
		e.enqueue(t, typ, nil, framework.WithID(id))
	}
	if err := a.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "all slots busy and a task waiting", func() bool {
		return a.Stats().Running == concurrency && a.WaitingForTest(framework.PriorityNormal) == 1
	})

	const deadline = 500 * time.Millisecond
	shutdownErr := make(chan error, 1)
	began := time.Now()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		shutdownErr <- a.Shutdown(ctx)
	}()
	// The waiting task is handed back as soon as pulling stops: shutdown is
	// under way. Now the quick tasks finish, within the deadline.
	testutil.Wait(t, waitLong, "waiting task handed back", func() bool { return a.Stats().HandedBack >= 1 })
	close(releaseQuick)
	recA.waitFor(t, "succeeded", "quick0")
	recA.waitFor(t, "succeeded", "quick1")

	err := testutil.Recv(t, shutdownErr, waitLong, "Shutdown returned")
	took := time.Since(began)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "2 running tasks handed back") {
		t.Fatalf("Shutdown = %v, want the deadline error naming 2 handed-back tasks", err)
	}
	if took < deadline || took > deadline+5*time.Second {
		t.Errorf("Shutdown took %v with a %v deadline", took, deadline)
	}
	for range 2 {
		if c := testutil.Recv(t, stuckCause, waitLong, "stuck handler cancelled"); !errors.Is(c, context.Canceled) {
			t.Errorf("stuck handler's context ended with %v", c)
		}
	}
	if err2 := a.Shutdown(context.Background()); err2 == nil || err2.Error() != err.Error() {
		t.Errorf("second Shutdown = %v, want the first result %v", err2, err)
	}
	if err := a.Start(t.Context()); !errors.Is(err, framework.ErrWorkerClosed) {
		t.Errorf("Start after Shutdown = %v, want ErrWorkerClosed", err)
	}
	if st := a.Stats(); st.Succeeded != 2 || st.Running != 0 {
		t.Errorf("worker A stats %+v", st)
	}

	// Worker B gets everything A did not finish, at once (not after an ack
	// wait).
	recB := newRecorder()
	b := e.worker(t, framework.WithHooks(recB.hooks()))
	b.HandleFunc(typ, func(context.Context, *framework.Task) error { return nil })
	startWorker(t, b)
	for _, id := range ids[2:] {
		recB.waitFor(t, "succeeded", id)
	}
	e.waitSettled(t, typ, framework.PriorityNormal)
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Errorf("task stream keeps %d messages", n)
	}
	for _, id := range ids {
		ok := recA.count("succeeded", id) + recB.count("succeeded", id)
		if ok != 1 {
			t.Errorf("task %s succeeded %d times, want once", id, ok)
		}
	}
	for _, id := range ids[:2] {
		if n := recB.count("started", id); n != 0 {
			t.Errorf("finished task %s ran again on the second worker", id)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Shutdown(ctx); err != nil {
		t.Errorf("idle worker Shutdown = %v", err)
	}
}

func TestRunStopsWhenContextEnds(t *testing.T) {
	t.Parallel()
	const typ = "shutdown.run"
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()), framework.WithShutdownTimeout(5*time.Second))
	release := make(chan struct{})
	w.HandleFunc(typ, func(context.Context, *framework.Task) error {
		<-release
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	runErr := make(chan error, 1)
	go func() { runErr <- w.Run(ctx) }()
	e.enqueue(t, typ, nil, framework.WithID("r1"))
	rec.waitFor(t, "started", "r1")
	cancel()
	// Run waits for the running task (within the shutdown timeout).
	select {
	case err := <-runErr:
		t.Fatalf("Run returned %v while a task was running", err)
	default:
	}
	close(release)
	if err := testutil.Recv(t, runErr, waitLong, "Run returned"); err != nil {
		t.Fatalf("Run = %v, want nil after a clean drain", err)
	}
	if rec.count("succeeded", "r1") != 1 {
		t.Errorf("task not acked before Run returned: %v", rec.of("r1"))
	}
	if err := w.Run(t.Context()); !errors.Is(err, framework.ErrWorkerClosed) {
		t.Errorf("second Run = %v, want ErrWorkerClosed", err)
	}
}

func TestShutdownBeforeStart(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	w.HandleFunc("shutdown.never", func(context.Context, *framework.Task) error { return nil })
	if err := w.Shutdown(t.Context()); err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	if err := w.Start(t.Context()); !errors.Is(err, framework.ErrWorkerClosed) {
		t.Fatalf("Start after Shutdown = %v, want ErrWorkerClosed", err)
	}
}

// TestShutdownWritesQueuedAcks: tasks that finish while Shutdown waits for
// them queue their acks for the worker's acker; Shutdown returns only once
// those acks are on the connection, so closing it right after loses none
// (they would come back after the ack wait).
func TestShutdownWritesQueuedAcks(t *testing.T) {
	t.Parallel()
	const typ, n = "shutdown.acks", 32
	e := newEnv(t)
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, framework.WithConcurrency(n))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	w.HandleFunc(typ, func(context.Context, *framework.Task) error {
		<-release
		return nil
	}, framework.WithAckWait(time.Minute))
	for range n {
		e.enqueue(t, typ, nil)
	}
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "every task running", func() bool { return w.Stats().Running == n })
	stopped := make(chan error, 1)
	go func() { stopped <- w.Shutdown(context.Background()) }()
	testutil.Wait(t, waitLong, "the worker stopping", func() bool { return liveness.Of(w).State == liveness.Stopping })
	close(release)
	if err := <-stopped; err != nil {
		t.Fatalf("Shutdown = %v", err)
	}
	nc.Close()
	if ci := e.waitSettled(t, typ, framework.PriorityNormal); ci.AckFloor.Stream == 0 {
		t.Fatalf("consumer settled without acks: %+v", ci)
	}
}
