package framework_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/health"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// Finding 9: a worker whose pulls hear nothing from the server for the stall
// limit (here: its stream was deleted, so no pull can be made) does not live
// on consuming nothing: Run returns ErrPullStalled.
func TestRunReturnsWhenPullsStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, framework.WithTimings(framework.Timings{StallLimit: framework.MinStallLimit}), framework.WithShutdownTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	w.HandleFunc("stall.gone", func(context.Context, *framework.Task) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(t.Context()) }()
	e.enqueue(t, "stall.gone", 1)
	testutil.Recv(t, ran, waitLong, "the worker ran a task")
	if err := e.js.DeleteStream(t.Context(), streams.MustNames("").TaskStream()); err != nil {
		t.Fatal(err)
	}
	err = testutil.Recv(t, done, waitLong, "Run returned after its pulls stalled")
	if !errors.Is(err, framework.ErrPullStalled) {
		t.Fatalf("Run = %v, want ErrPullStalled", err)
	}
}

// A fetch loop waiting for a free slot behind a long handler is busy, not
// stalled: a handler running two and a half times the stall limit does not
// stop the worker.
func TestLongHandlerIsNotAStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testutil.Connect(t, e.srv)
	const limit = framework.MinStallLimit
	w, err := framework.NewWorker(nc, framework.WithTimings(framework.Timings{StallLimit: limit}), framework.WithConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	finished := make(chan struct{}, 2)
	w.HandleFunc("stall.long", func(ctx context.Context, _ *framework.Task) error {
		select {
		case <-time.After(5 * limit / 2):
		case <-ctx.Done():
			return ctx.Err()
		}
		finished <- struct{}{}
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.enqueue(t, "stall.long", 1)
	e.enqueue(t, "stall.long", 2) // waits for the one slot: its loop is busy
	testutil.Recv(t, finished, waitLong, "first long task finished")
	testutil.Recv(t, finished, waitLong, "second long task finished")
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while its loop waited for a slot", err)
	default:
	}
	cancel()
	if err := testutil.Recv(t, done, waitLong, "Run returned after cancel"); err != nil {
		t.Fatalf("Run = %v", err)
	}
}

// A paused consumer (an operator, or an open circuit breaker elsewhere in
// the cluster) still answers with idle heartbeats: a pause longer than the
// stall limit does not stop the worker.
func TestPausedConsumerIsNotAStall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testutil.Connect(t, e.srv)
	const limit = framework.MinStallLimit
	w, err := framework.NewWorker(nc, framework.WithTimings(framework.Timings{StallLimit: limit}))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	w.HandleFunc("stall.paused", func(context.Context, *framework.Task) error {
		select {
		case ran <- struct{}{}:
		default:
		}
		return nil
	})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	e.enqueue(t, "stall.paused", 1)
	testutil.Recv(t, ran, waitLong, "the worker ran a task")
	names := streams.MustNames("")
	for _, p := range []framework.Priority{framework.PriorityCritical, framework.PriorityHigh, framework.PriorityNormal, framework.PriorityLow} {
		if _, err := e.js.PauseConsumer(t.Context(), names.TaskStream(), names.ConsumerName("stall.paused", p), time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Run returned %v while its consumers were paused", err)
	case <-time.After(5 * limit / 2):
	}
	if r := health.Check(t.Context(), w); !r.Live {
		t.Fatalf("paused worker not live: %v", r.Problems)
	}
	cancel()
	if err := testutil.Recv(t, done, waitLong, "Run returned after cancel"); err != nil {
		t.Fatalf("Run = %v", err)
	}
}
