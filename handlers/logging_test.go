package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/handlers"
)

const secret = "card=4111111111111111"

func TestLoggingOutcomes(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		err       error
		attempt   int
		wantMsg   string
		wantLevel slog.Level
	}{
		{"success", nil, 1, "task done", slog.LevelInfo},
		{"retryable failure", errBoom, 1, "task failed; will be retried", slog.LevelWarn},
		{"last attempt", errBoom, 3, "task failed for good", slog.LevelError},
		{"permanent", framework.Permanent(errBoom), 1, "task failed for good", slog.LevelError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rec := newRecords()
			h := handlers.Logging(slog.New(rec))(framework.HandlerFunc(func(context.Context, *framework.Task) error {
				return tc.err
			}))
			task := &framework.Task{ID: "t-1", Type: "payments.charge", Priority: framework.PriorityHigh,
				Attempt: tc.attempt, MaxAttempts: 3, Payload: []byte(secret)}
			if err := h.Handle(t.Context(), task); err != tc.err {
				t.Fatalf("Handle returned %v, want the handler's error %v unchanged", err, tc.err)
			}
			all := rec.snapshot()
			if len(all) != 2 || all[0].msg != "task started" || all[0].level != slog.LevelDebug {
				t.Fatalf("records = %+v, want a debug \"task started\" then one outcome", all)
			}
			got := all[1]
			if got.msg != tc.wantMsg || got.level != tc.wantLevel {
				t.Fatalf("outcome record %q at %v, want %q at %v", got.msg, got.level, tc.wantMsg, tc.wantLevel)
			}
			want := map[string]string{
				framework.LogKeyTaskID:   "t-1",
				framework.LogKeyTaskType: "payments.charge",
				framework.LogKeyPriority: "high",
				framework.LogKeyAttempt:  fmt.Sprint(tc.attempt),
			}
			for _, r := range all {
				for k, v := range want {
					if got := r.attrs[k].String(); got != v {
						t.Errorf("%q: %s = %q, want %q", r.msg, k, got, v)
					}
				}
			}
			if _, ok := got.attrs[handlers.LogKeyDuration]; !ok {
				t.Errorf("outcome record has no %s attribute", handlers.LogKeyDuration)
			}
			_, hasErr := got.attrs[framework.LogKeyError]
			if hasErr != (tc.err != nil) {
				t.Errorf("error attribute present = %v, want %v", hasErr, tc.err != nil)
			}
			assertNoPayload(t, all)
		})
	}
}

func assertNoPayload(t *testing.T, all []record) {
	t.Helper()
	for _, r := range all {
		for k, v := range r.attrs {
			if strings.Contains(v.String(), "4111") {
				t.Errorf("record %q logs the payload under %s: %v", r.msg, k, v)
			}
		}
	}
}

func TestLoggingPanicIsLoggedAndPropagated(t *testing.T) {
	t.Parallel()
	rec := newRecords()
	h := handlers.Logging(slog.New(rec))(framework.HandlerFunc(func(context.Context, *framework.Task) error {
		panic("kaboom")
	}))
	task := &framework.Task{ID: "t-2", Type: "a.b", Attempt: 1, MaxAttempts: 1}
	func() {
		defer func() {
			if r := recover(); r != "kaboom" {
				t.Fatalf("recovered %v, want the handler's panic to pass through", r)
			}
		}()
		_ = h.Handle(t.Context(), task)
	}()
	if got := rec.find("task handler panicked"); len(got) != 1 || got[0].level != slog.LevelError {
		t.Fatalf("panic records = %+v, want one at error level", got)
	}
}

// TestLoggingWithWorker runs the middleware on a worker with a nil logger: the
// records go to the worker's logger, carry the task's attributes, follow
// the attempts and never contain the payload.
func TestLoggingWithWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	rec := newRecords()
	hooks, out := outcomes()
	w := e.Worker(t, framework.WithLogger(slog.New(rec)), framework.WithHooks(hooks),
		framework.WithMiddleware(handlers.Logging(nil)))
	w.HandleFunc("billing.invoice", func(ctx context.Context, task *framework.Task) error {
		if task.Attempt == 1 {
			return errors.New("upstream unavailable")
		}
		return nil
	}, fastRetries())
	start(t, w)
	info := e.Enqueue(t, "billing.invoice", map[string]string{"secret": secret})

	if o := recvOutcome(t, out); o.event != "retried" || o.attempt != 1 {
		t.Fatalf("first outcome %+v, want a retry of attempt 1", o)
	}
	if o := recvOutcome(t, out); o.event != "succeeded" || o.attempt != 2 {
		t.Fatalf("second outcome %+v, want success on attempt 2", o)
	}
	for msg, attempt := range map[string]string{"task failed; will be retried": "1", "task done": "2"} {
		got := rec.find(msg)
		if len(got) != 1 {
			t.Fatalf("%d %q records, want 1", len(got), msg)
		}
		if id := got[0].attrs[framework.LogKeyTaskID].String(); id != info.ID {
			t.Errorf("%q: task_id %q, want %q", msg, id, info.ID)
		}
		if a := got[0].attrs[framework.LogKeyAttempt].String(); a != attempt {
			t.Errorf("%q: attempt %s, want %s", msg, a, attempt)
		}
	}
	if n := len(rec.find("task started")); n != 2 {
		t.Errorf("%d \"task started\" records, want 2", n)
	}
	assertNoPayload(t, rec.snapshot())
}

func recvOutcome(t *testing.T, ch <-chan outcome) outcome {
	t.Helper()
	select {
	case o := <-ch:
		return o
	case <-time.After(15 * time.Second):
		t.Fatal("timed out waiting for a task outcome")
	}
	return outcome{}
}
