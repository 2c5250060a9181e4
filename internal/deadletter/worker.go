package deadletter

import (
	"context"
	"errors"
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

// Cores are a worker's dead-letter cores, one per task partition
// ([Partitions]), with the worker's settings; P names a task partition
// (streams.Names), and New returns the core of one. Of is safe for
// concurrent use with Grow; Prepare and Grow are called by one goroutine
// at a time.
type Cores[P any] struct {
	first *Core
	parts *Partitions
	New   func(P) *Core
	// errorTTL is how long the errors bucket keeps a failed attempt;
	// reconcileEvery how often the reconcilers look.
	errorTTL, reconcileEvery time.Duration
}

// NewCores returns the cores of a worker whose first partition is first,
// with at most max partitions, keeping failed attempts for errorTTL and
// reconciling every reconcileEvery.
func NewCores[P any](first P, newCore func(P) *Core, max int, errorTTL, reconcileEvery time.Duration) *Cores[P] {
	c := newCore(first)
	return &Cores[P]{first: c, parts: NewPartitions(c, max), New: newCore, errorTTL: errorTTL, reconcileEvery: reconcileEvery}
}

// Prepare is the worker's start-up step: the first core's ([Core.Prepare]),
// then [Cores.Grow] with the further partitions more.
func (x *Cores[P]) Prepare(ctx context.Context, more []P) error {
	if err := x.first.Prepare(ctx, x.errorTTL); err != nil {
		return err
	}
	return x.Grow(ctx, more)
}

// Grow adds the cores of further partitions, checking that their task
// streams exist.
func (x *Cores[P]) Grow(ctx context.Context, parts []P) error {
	for _, p := range parts {
		c := x.New(p)
		if _, err := c.Stream(ctx, c.topo.TaskStream); err != nil {
			return err
		}
		x.parts.Add(c)
	}
	return nil
}

// Of returns the core of a task stream, the first partition's for a
// stream of no partition added.
func (x *Cores[P]) Of(stream string) *Core {
	if c := x.parts.Of(stream); c != nil {
		return c
	}
	return x.first
}

// Run runs the router and the reconcilers until ctx ends
// ([Partitions.Run]).
func (x *Cores[P]) Run(ctx context.Context) { x.parts.Run(ctx, x.reconcileEvery) }

// ReasonOf returns the reason of the record of a task its worker
// terminates for cause: [ReasonInvalid] when cause wraps corrupt,
// [ReasonDecode] decode, [ReasonVersion] version, else [ReasonPermanent]
// for a permanent failure and [ReasonMaxDeliveries] for a failed last
// attempt.
func ReasonOf(cause error, permanent bool, corrupt, decode, version error) string {
	switch {
	case errors.Is(cause, corrupt):
		return ReasonInvalid
	case errors.Is(cause, decode):
		return ReasonDecode
	case errors.Is(cause, version):
		return ReasonVersion
	case permanent:
		return ReasonPermanent
	}
	return ReasonMaxDeliveries
}
