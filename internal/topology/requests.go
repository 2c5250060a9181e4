package topology

import (
	"context"
	"time"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// RequestTimeout bounds each attempt of [EnsureConsumer] and
// [EnsureOrderedConsumer] inside the caller's deadline: a request that gets
// no answer (a consumer's leader being elected on a cluster, a request lost
// in a failover) is abandoned after RequestTimeout and tried again, instead
// of holding the caller (a worker's Start) for its whole deadline. It is
// above nats.go's default API timeout (5 s), which a healthy server answers
// well within.
const RequestTimeout = 5 * time.Second

// retryRequests is retryTransient with a deadline of its own for each
// attempt: per, or what is left of ctx when that is shorter. An attempt
// that ran out of its deadline is transient and tried again while ctx
// lasts; the attempt's context is the one f must pass to its requests.
func retryRequests(ctx context.Context, per time.Duration, f func(ctx context.Context) error) error {
	return streamdefs.RetryTransient(ctx, func() error {
		actx, cancel := context.WithTimeout(ctx, per)
		defer cancel()
		return f(actx)
	})
}
