package deadletter

import (
	"context"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Partitions are the dead-letter cores of every task partition of a
// worker: one router, on the first core, reads the advisories of all of
// them and routes each on the core of its task's own stream; each core runs
// the reconciler of its stream. Cores of partitions added while the worker
// runs are added with [Partitions.Add], and Run starts their reconcilers.
// Of is safe for concurrent use with Add; Add is called by one goroutine
// at a time.
type Partitions struct {
	cores atomic.Pointer[coreSet]
	// added passes the cores of added partitions to Run.
	added chan *Core
}

// coreSet is one immutable set of cores: in partition order, and by task
// stream.
type coreSet struct {
	list     []*Core
	byStream map[string]*Core
}

// NewPartitions returns the cores of a worker whose first partition's core
// is first, and makes first's router look up the others by stream
// ([Core.Partitions]). max bounds the partitions added before Run takes
// them (the most a deployment has).
func NewPartitions(first *Core, max int) *Partitions {
	d := &Partitions{added: make(chan *Core, max)}
	d.cores.Store(&coreSet{list: []*Core{first}, byStream: map[string]*Core{first.Topology().TaskStream: first}})
	first.Partitions = d.Of
	return d
}

// Add adds c, the core of another partition's task stream. Without Run
// (the router is off) nothing reconciles it.
func (d *Partitions) Add(c *Core) {
	old := d.cores.Load() // immutable: copied, then replaced
	next := &coreSet{list: append(slices.Clone(old.list), c), byStream: maps.Clone(old.byStream)}
	next.byStream[c.Topology().TaskStream] = c
	d.cores.Store(next)
	select {
	case d.added <- c:
	default:
	}
}

// Of returns the core of a task stream, nil for a stream of no partition
// added.
func (d *Partitions) Of(stream string) *Core { return d.cores.Load().byStream[stream] }

// Run runs the router on the first core and a reconciler per core, those
// added meanwhile included, each every interval, until ctx ends; it returns
// once they all returned.
func (d *Partitions) Run(ctx context.Context, every time.Duration) {
	var wg sync.WaitGroup
	defer wg.Wait()
	cores := d.cores.Load().list
	wg.Go(func() { cores[0].RunRouter(ctx) })
	started := make(map[*Core]bool)
	reconcile := func(c *Core) {
		if !started[c] {
			started[c] = true
			wg.Go(func() { c.RunReconciler(ctx, every) })
		}
	}
	for _, c := range cores {
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
