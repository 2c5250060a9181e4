package handlers_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/handlers"
)

var errInvalidAccount = errors.New("billing: invalid account")

func isInvalidAccount(err error) bool { return errors.Is(err, errInvalidAccount) }

func TestPermanentIf(t *testing.T) {
	t.Parallel()
	other := errors.New("timeout talking to billing")
	already := framework.Permanent(other)
	tests := []struct {
		name          string
		err           error
		wantPermanent bool
		wantSame      bool // returned unchanged
		wantMatchCall bool
	}{
		{"nil", nil, false, true, false},
		{"selected", errInvalidAccount, true, false, true},
		{"selected when wrapped", errors.Join(errors.New("charge"), errInvalidAccount), true, false, true},
		{"not selected", other, false, true, true},
		{"already permanent", already, true, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			called := false
			h := handlers.PermanentIf(func(err error) bool {
				called = true
				return isInvalidAccount(err)
			})(framework.HandlerFunc(func(context.Context, *framework.Task) error { return tc.err }))
			err := h.Handle(t.Context(), task())
			if got := framework.IsPermanent(err); got != tc.wantPermanent {
				t.Errorf("IsPermanent = %v, want %v (err %v)", got, tc.wantPermanent, err)
			}
			if tc.wantSame && err != tc.err {
				t.Errorf("err = %v, want %v unchanged", err, tc.err)
			}
			if tc.err != nil && !errors.Is(err, tc.err) {
				t.Errorf("err = %v no longer wraps %v", err, tc.err)
			}
			if called != tc.wantMatchCall {
				t.Errorf("match called = %v, want %v", called, tc.wantMatchCall)
			}
		})
	}
}

func TestPermanentIfPanicsOnNil(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("PermanentIf(nil) did not panic")
		}
	}()
	handlers.PermanentIf(nil)
}

// TestPermanentIfWithWorker checks that a selected error fails the task on
// its first attempt, with retries left.
func TestPermanentIfWithWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	hooks, out := outcomes()
	w := e.Worker(t, framework.WithHooks(hooks))
	w.HandleFunc("billing.charge", func(context.Context, *framework.Task) error {
		return errInvalidAccount
	}, framework.WithTypeMiddleware(handlers.PermanentIf(isInvalidAccount)), framework.WithMaxAttempts(5), fastRetries())
	start(t, w)
	e.Enqueue(t, "billing.charge", nil)

	o := recvOutcome(t, out)
	if o.event != "failed" || o.attempt != 1 || !framework.IsPermanent(o.err) || !errors.Is(o.err, errInvalidAccount) {
		t.Fatalf("outcome %+v, want a permanent failure of attempt 1 wrapping errInvalidAccount", o)
	}
	if st := w.Stats(); st.Started != 1 || st.Retried != 0 {
		t.Fatalf("stats %+v, want one attempt and no retry", st)
	}
}
