package handlers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// Timeout returns middleware that bounds one attempt of the wrapped handler
// to d. When d passes, the handler's context is cancelled with a cause that
// wraps [framework.ErrHandlerTimeout]; an error the handler then returns is
// wrapped with that cause, so errors.Is(err, framework.ErrHandlerTimeout)
// holds, and the attempt is retried like any failure. A handler that
// finishes successfully after the deadline still succeeds. A handler that
// ignores its context is not abandoned: Timeout waits for it to return.
//
// The type's own bound, [framework.WithTimeout] (default 30 minutes), still
// applies; the shorter one wins. Use Timeout to bound every type of a worker
// at once ([framework.WithMiddleware]) or to bound only the handlers below it
// in a chain.
//
// Timeout panics if d ≤ 0, like other registration errors.
func Timeout(d time.Duration) framework.Middleware {
	if d <= 0 {
		panic(fmt.Sprintf("handlers: Timeout(%v): want a duration > 0", d))
	}
	return func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			// A fresh cause per call tells this deadline apart from an outer
			// one with the same sentinel.
			cause := fmt.Errorf("handlers: %w after %v", framework.ErrHandlerTimeout, d)
			ctx, cancel := context.WithTimeoutCause(ctx, d, cause)
			defer cancel()
			err := next.Handle(ctx, t)
			if err != nil && context.Cause(ctx) == cause && !errors.Is(err, cause) {
				return fmt.Errorf("%w: %w", cause, err)
			}
			return err
		})
	}
}
