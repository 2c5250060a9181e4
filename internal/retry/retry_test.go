package retry

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDo(t *testing.T) {
	t.Parallel()
	p := Policy{Min: time.Millisecond, Max: 4 * time.Millisecond, Jitter: 0.5}
	errAgain := errors.New("again")
	always := func(error) bool { return true }

	calls := 0
	err := Do(t.Context(), p, always, func() error {
		calls++
		if calls < 4 {
			return errAgain
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("Do = %v after %d calls, want nil after 4", err, calls)
	}

	calls = 0
	boom := errors.New("boom")
	err = Do(t.Context(), p, func(err error) bool { return err == errAgain }, func() error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("non-retryable: %v after %d calls, want boom after 1", err, calls)
	}

	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	err = Do(ctx, p, always, func() error {
		calls++
		if calls == 3 {
			cancel()
		}
		return errAgain
	})
	if !errors.Is(err, errAgain) || calls != 3 {
		t.Fatalf("cancelled: %v after %d calls, want the last error after 3", err, calls)
	}
}

func TestPolicyGrowsToMax(t *testing.T) {
	t.Parallel()
	b := Policy{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond}.New()
	want := []time.Duration{10, 20, 40, 40, 40}
	for i, w := range want {
		if d := b.NextBackOff(); d != w*time.Millisecond {
			t.Fatalf("wait %d = %v, want %v", i, d, w*time.Millisecond)
		}
	}
}
