package framework

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/streams"
)

// dlqPartitions are the dead-letter cores of every task partition: one
// router, on the first core, reads the advisories of all of them and
// routes each on its task's own partition's core; each core runs the
// reconciler of its partition's stream. Partitions added while the worker
// runs (Worker.growPartitions) get theirs then.
type dlqPartitions struct {
	cores atomic.Pointer[dlqCores]
	// added passes the cores of added partitions to the running service,
	// which starts their reconcilers.
	added chan *deadletter.Core
}

// dlqCores is one immutable set of cores: in partition order, and by task
// stream.
type dlqCores struct {
	list     []*deadletter.Core
	byStream map[string]*deadletter.Core
}

// init sets the first partition's core, and makes the router look up the
// others by stream.
func (d *dlqPartitions) init(first *deadletter.Core) {
	d.added = make(chan *deadletter.Core, streams.MaxPartitions)
	d.cores.Store(&dlqCores{list: []*deadletter.Core{first}, byStream: map[string]*deadletter.Core{first.Topology().TaskStream: first}})
	first.Partitions = func(stream string) *deadletter.Core { return d.cores.Load().byStream[stream] }
}

// grow adds the cores of the partitions of parts, checking their streams.
func (x *dlqExt) grow(ctx context.Context, w *Worker, parts []streams.Names) error {
	for _, names := range parts {
		c := w.deadLetterCore(names)
		if _, err := c.Stream(ctx, names.TaskStream()); err != nil {
			return err
		}
		old := x.parts.cores.Load() // immutable: copied, then replaced
		next := &dlqCores{list: append(slices.Clone(old.list), c), byStream: maps.Clone(old.byStream)}
		next.byStream[names.TaskStream()] = c
		x.parts.cores.Store(next)
		select {
		case x.parts.added <- c:
		default: // no service (router off): nothing reconciles
		}
	}
	return nil
}

// coreOf returns the dead-letter core of t's partition.
func (x *dlqExt) coreOf(t *Task) *deadletter.Core {
	if c := x.parts.cores.Load().byStream[t.Stream]; c != nil {
		return c
	}
	return x.core
}

// run runs the router on first and a reconciler per partition, those of
// partitions added meanwhile included, until ctx ends.
func (d *dlqPartitions) run(ctx context.Context, first *deadletter.Core, every time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { first.RunRouter(ctx) })
	started := make(map[*deadletter.Core]bool)
	reconcile := func(c *deadletter.Core) {
		if !started[c] {
			started[c] = true
			wg.Go(func() { c.RunReconciler(ctx, every) })
		}
	}
	for _, c := range d.cores.Load().list {
		reconcile(c)
	}
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-d.added:
			reconcile(c)
		}
	}
}
