package handlers

import (
	"context"

	"github.com/jetflow-io/jetflow/framework"
)

// PermanentIf returns middleware that marks the errors for which match
// returns true as permanent ([framework.Permanent]): the task fails at once,
// without further attempts. Use it for failures that retrying cannot fix,
// such as validation errors of a downstream API, without changing every
// handler:
//
//	handlers.PermanentIf(func(err error) bool {
//		return errors.Is(err, billing.ErrInvalidAccount)
//	})
//
// match is called only with non-nil errors that are not already permanent,
// from many goroutines at once. Errors it does not select pass through
// unchanged. PermanentIf panics if match is nil.
func PermanentIf(match func(err error) bool) framework.Middleware {
	if match == nil {
		panic("handlers: PermanentIf(nil)")
	}
	return func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			err := next.Handle(ctx, t)
			if err != nil && !framework.IsPermanent(err) && match(err) {
				return framework.Permanent(err)
			}
			return err
		})
	}
}
