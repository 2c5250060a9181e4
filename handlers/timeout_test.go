package handlers_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/handlers"
)

func task() *framework.Task {
	return &framework.Task{ID: "t", Type: "a.b", Attempt: 1, MaxAttempts: 3}
}

func TestTimeoutCancelsSlowHandler(t *testing.T) {
	t.Parallel()
	var cause error
	h := handlers.Timeout(20 * time.Millisecond)(framework.HandlerFunc(func(ctx context.Context, _ *framework.Task) error {
		<-ctx.Done()
		cause = context.Cause(ctx)
		return ctx.Err()
	}))
	err := h.Handle(t.Context(), task())
	if !errors.Is(err, framework.ErrHandlerTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want it to wrap ErrHandlerTimeout and the handler's context.DeadlineExceeded", err)
	}
	if !errors.Is(cause, framework.ErrHandlerTimeout) {
		t.Fatalf("context cause seen by the handler = %v, want ErrHandlerTimeout", cause)
	}
	if framework.IsPermanent(err) {
		t.Fatal("a timeout must be retried, not permanent")
	}
}

func TestTimeoutLeavesFastHandlersAlone(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	for _, want := range []error{nil, errBoom} {
		h := handlers.Timeout(time.Hour)(framework.HandlerFunc(func(ctx context.Context, _ *framework.Task) error {
			if ctx.Err() != nil {
				t.Error("context cancelled early")
			}
			if _, ok := ctx.Deadline(); !ok {
				t.Error("context has no deadline")
			}
			return want
		}))
		if err := h.Handle(t.Context(), task()); err != want {
			t.Fatalf("err = %v, want %v unchanged", err, want)
		}
	}
}

func TestTimeoutSuccessAfterDeadlineStands(t *testing.T) {
	t.Parallel()
	h := handlers.Timeout(10 * time.Millisecond)(framework.HandlerFunc(func(ctx context.Context, _ *framework.Task) error {
		<-ctx.Done()
		return nil // the work completed anyway
	}))
	if err := h.Handle(t.Context(), task()); err != nil {
		t.Fatalf("err = %v, want nil", err)
	}
}

func TestTimeoutDoesNotClaimOuterCancellation(t *testing.T) {
	t.Parallel()
	outerCause := errors.New("worker stopping")
	ctx, cancel := context.WithCancelCause(t.Context())
	h := handlers.Timeout(time.Hour)(framework.HandlerFunc(func(ctx context.Context, _ *framework.Task) error {
		cancel(outerCause)
		<-ctx.Done()
		return context.Cause(ctx)
	}))
	err := h.Handle(ctx, task())
	if !errors.Is(err, outerCause) || errors.Is(err, framework.ErrHandlerTimeout) {
		t.Fatalf("err = %v, want the outer cause without ErrHandlerTimeout", err)
	}
}

func TestTimeoutPanicsOnInvalidDuration(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, -time.Second} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Timeout(%v) did not panic", d)
				}
			}()
			handlers.Timeout(d)
		}()
	}
}

// TestTimeoutWithWorker checks that a timed-out attempt is retried by the
// worker and that its last attempt fails for good, both with an error
// wrapping ErrHandlerTimeout.
func TestTimeoutWithWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hooks, out := outcomes()
	w := e.Worker(t, framework.WithHooks(hooks))
	w.HandleFunc("media.transcode", func(ctx context.Context, _ *framework.Task) error {
		<-ctx.Done()
		return ctx.Err()
	}, framework.WithTypeMiddleware(handlers.Timeout(50*time.Millisecond)), framework.WithMaxAttempts(2), fastRetries())
	start(t, w)
	e.Enqueue(t, "media.transcode", nil)

	for _, want := range []outcome{{event: "retried", attempt: 1}, {event: "failed", attempt: 2}} {
		o := recvOutcome(t, out)
		if o.event != want.event || o.attempt != want.attempt || !errors.Is(o.err, framework.ErrHandlerTimeout) {
			t.Fatalf("outcome %+v, want %s on attempt %d with ErrHandlerTimeout", o, want.event, want.attempt)
		}
	}
}
