package retry

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy shapes the waits between attempts: the first is Min, each next
// one doubles up to Max, and each is spread by ±Jitter (a fraction, 0 to 1)
// of itself so that many waiters do not retry in step.
type Policy struct {
	Min, Max time.Duration
	Jitter   float64
}

// New returns a fresh backoff for p. It never stops by itself: the
// caller's context bounds the loop.
func (p Policy) New() backoff.BackOff {
	return backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(p.Min),
		backoff.WithMaxInterval(p.Max),
		backoff.WithMultiplier(2),
		backoff.WithRandomizationFactor(p.Jitter),
		backoff.WithMaxElapsedTime(0),
	)
}

// Do calls op until it returns nil, an error retryable rejects, or ctx
// ends, waiting between calls as p says. It returns op's last error (nil
// on success), not ctx's: the caller learns why the last attempt failed.
func Do(ctx context.Context, p Policy, retryable func(error) bool, op func() error) error {
	b := p.New()
	for {
		err := op()
		if err == nil || !retryable(err) || ctx.Err() != nil {
			return err
		}
		if !Sleep(ctx, b.NextBackOff()) {
			return err
		}
	}
}

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Delay returns the wait before attempt n+1 after n failed ones (n from
// 1): the n-th wait of a fresh backoff of p.
func (p Policy) Delay(n int) time.Duration {
	b := p.New()
	var d time.Duration
	for range max(min(n, 64), 1) {
		d = b.NextBackOff()
	}
	return d
}
