package streamdefs

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/retry"
)

// RetryFor bounds how long [RetryTransient] retries transient cluster
// errors, and topology set-up waits, when the context has no deadline.
const RetryFor = 30 * time.Second

// retryPolicy spaces the attempts of [RetryTransient] and the waits of
// [Backoff].
var retryPolicy = retry.Policy{Min: 50 * time.Millisecond, Max: time.Second}

// Backoff returns a fresh backoff spacing the attempts of topology set-up,
// as [RetryTransient] spaces its own.
func Backoff() backoff.BackOff { return retryPolicy.New() }

// RetryTransient calls f until it returns nil or an error that is not
// transient (natserr.Transient) or ctx ends, or for [RetryFor] when ctx has
// no deadline. Errors of a cluster that is still forming ("no suitable
// peers", "temporarily unavailable", timeouts) are transient.
func RetryTransient(ctx context.Context, f func() error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, RetryFor)
		defer cancel()
	}
	return retry.Do(ctx, retryPolicy, natserr.Transient, f)
}
