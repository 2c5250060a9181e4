package framework

import (
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/internal/pull"
)

// Heartbeats for the pull buffers: tasks delivered to a pull iterator but
// not yet taken by its fetcher are on their ack clock too. The sweeper
// (heartbeats.go) beats the queues of the worker's live iterators with the
// same rule as the tasks it holds (internal/pull explains the rest).

// pullBeats is the set of a worker's live pull iterators, each with the
// heartbeat interval of its type and what to do when a heartbeat cannot be
// sent.
type pullBeats struct {
	mu    sync.Mutex
	iters map[*pullIter]pullBeat
}

type pullBeat struct {
	every  time.Duration
	failed func(*pull.Msg, error)
}

func (b *pullBeats) watch(it *pullIter, every time.Duration, failed func(*pull.Msg, error)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.iters == nil {
		b.iters = make(map[*pullIter]pullBeat)
	}
	b.iters[it] = pullBeat{every, failed}
}

func (b *pullBeats) unwatch(it *pullIter) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.iters, it)
}

// beat heartbeats the queues of all watched iterators (see [pull.Iter.BeatQueued]);
// tick is the sweep interval.
func (b *pullBeats) beat(now time.Time, tick time.Duration) {
	b.mu.Lock()
	type entry struct {
		it *pullIter
		pullBeat
	}
	iters := make([]entry, 0, len(b.iters))
	for it, pb := range b.iters {
		iters = append(iters, entry{it, pb})
	}
	b.mu.Unlock()
	next := now.Add(tick).UnixNano()
	for _, e := range iters {
		e.it.BeatQueued(now, next, e.every, e.failed)
	}
}
