package liveness

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/testutil"
)

var quiet = slog.New(slog.DiscardHandler)

// WaitClosed returns true once the connection is closed for good, false
// when told to stop first.
func TestWaitClosed(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	nc := testutil.Connect(t, s)
	stop := make(chan struct{})
	close(stop)
	if WaitClosed(nc, stop) {
		t.Error("an open connection reported closed")
	}
	done := make(chan bool)
	go func() { done <- WaitClosed(nc, make(chan struct{})) }()
	nc.Close()
	select {
	case closed := <-done:
		if !closed {
			t.Error("a closed connection reported open")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitClosed did not return after the connection closed")
	}
	if !WaitClosed(nc, make(chan struct{})) {
		t.Error("an already closed connection reported open")
	}
}

// StartStep retries a step that failed because the server did not
// answer, and returns at once an error no wait repairs.
func TestStartStep(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	nc := testutil.Connect(t, s)
	calls := 0
	err := StartStep(t.Context(), nc, quiet, "error", func() error {
		calls++
		if calls < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("transient failures: %v after %d calls; want success on the third", err, calls)
	}
	invalid := errors.New("invalid configuration")
	calls = 0
	if err := StartStep(t.Context(), nc, quiet, "error", func() error { calls++; return invalid }); err != invalid || calls != 1 {
		t.Errorf("a permanent failure: %v after %d calls; want it at once", err, calls)
	}
	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	err = StartStep(ctx, nc, quiet, "error", func() error {
		calls++
		cancel()
		return nats.ErrTimeout
	})
	if !errors.Is(err, nats.ErrTimeout) || calls != 1 {
		t.Errorf("ended while failing: %v after %d calls", err, calls)
	}
	ctx2, cancel2 := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel2()
	if err := StartStep(ctx2, nc, quiet, "error", func() error { return nats.ErrTimeout }); !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, nats.ErrTimeout) {
		t.Errorf("ended while waiting: %v; want the context's error and the step's", err)
	}
	nc.Close()
	ctx3, cancel3 := context.WithTimeout(t.Context(), 5*time.Second) // bounds a wrong retry of a closed connection
	defer cancel3()
	if err := StartStep(ctx3, nc, quiet, "error", func() error { return nats.ErrConnectionClosed }); !errors.Is(err, natserr.ErrNotConnected) {
		t.Errorf("closed connection: %v; want ErrNotConnected", err)
	}
}

// Watch reports a stalled loop while the worker runs, and nothing while
// it does not; it returns when stopped.
func TestWatch(t *testing.T) {
	t.Parallel()
	var h Loops
	h.Loop("c").Poll(time.Now().Add(-time.Hour))
	start := func() time.Time { return time.Now().Add(-time.Hour) }
	stop := make(chan struct{})
	type result struct {
		name string
		ok   bool
	}
	done := make(chan result, 1)
	running := make(chan bool, 1)
	running <- false
	isRunning := func() bool {
		select {
		case r := <-running:
			return r
		default:
			return true
		}
	}
	go func() {
		name, _, ok := h.Watch(stop, 20*time.Millisecond, isRunning, start)
		done <- result{name, ok}
	}()
	select {
	case r := <-done:
		if !r.ok || r.name != "c" {
			t.Errorf("Watch = %q, %v; want the stalled loop c", r.name, r.ok)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Watch did not report a loop silent for an hour")
	}
	if len(running) != 0 {
		t.Error("Watch reported before asking whether the worker runs")
	}
	close(stop)
	if _, _, ok := h.Watch(stop, time.Hour, func() bool { return true }, start); ok {
		t.Error("a stopped Watch reported a stall")
	}
}
