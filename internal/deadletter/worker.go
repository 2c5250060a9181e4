package deadletter

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
)

// Prepare is a worker's start-up step: it checks that the dead-letter and
// task streams exist and creates the errors bucket like the task stream
// (same storage and replicas), keeping its records for ttl. A bucket that
// cannot be created is logged, not fatal: records written by the router
// then lack the last error.
func (c *Core) Prepare(ctx context.Context, ttl time.Duration) error {
	if _, err := c.Stream(ctx, c.topo.DLQStream); err != nil {
		return err
	}
	if _, err := c.Stream(ctx, c.topo.TaskStream); err != nil {
		return err
	}
	err := jsapi.EnsureBucket(ctx, c.js, jsapi.TaskStreamBucket(ctx, c.js, c.topo.TaskStream, jetstream.KeyValueConfig{
		Bucket:      c.topo.ErrorsBucket,
		Description: "jetflow: failed attempts of tasks, read when a task is dead-lettered",
		History:     1,
		TTL:         ttl,
	}), false)
	if err != nil {
		c.log.Warn("jetflow could not create the errors bucket; dead-letter records written by the router will lack the last error",
			slog.String("bucket", c.topo.ErrorsBucket), slog.Any(logKeyError, err))
	}
	return nil
}

// Run runs the router and the reconciler (looking every reconcileEvery)
// until ctx ends.
func (c *Core) Run(ctx context.Context, reconcileEvery time.Duration) {
	var wg sync.WaitGroup
	wg.Go(func() { c.RunRouter(ctx) })
	wg.Go(func() { c.RunReconciler(ctx, reconcileEvery) })
	wg.Wait()
}
