package framework

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/pull"
)

// The worker sends its own pull requests (internal/pull explains why): a
// producer cannot forge a status of the server with a Status header, and a
// pull request whose heartbeats stop is replaced within seconds.

// pullIter fetches from one durable pull consumer with its own pull
// requests.
type pullIter = pull.Iter

// Open opens a pull iterator on cons, counting lost pull requests in the
// worker's stats and reporting them to the PullLost hooks. Tasks it starts
// directly (startDirect) continue from src.
func (f *fetchSide) Open(cons jetstream.Consumer, src *feed) (*pullIter, error) {
	w, tt, prio := f.w, f.s.tt, f.s.prio
	info := cons.CachedInfo()
	size := func() int { return w.pullSize(tt, prio) } // pullsize.go
	it, err := pull.NewIter(w.nc, info.Stream, info.Name, size, func() {
		w.stats.pullsLost.Add(1)
		w.log.Warn("jetflow pull request lost; replaced", slog.String(LogKeyTaskType, tt.name),
			slog.String(LogKeyPriority, prio.String()))
		w.emitPullLost(tt.name, prio)
	})
	if err != nil {
		return nil, err
	}
	// Arrivals at an empty buffer may start at once (fetch.go); the
	// sweeper beats the rest while they wait.
	it.SetDirect(w.startDirect(tt, prio, src))
	w.bg.beats.Watch(it, tt.cfg.heartbeat, func(m *pull.Msg, err error) {
		w.ackFailed(context.Background(), nil, newPending(tt, prio, m), "in_progress", err)
	})
	return it, nil
}

// Close stops it, handing back what it still buffers, and ends its
// heartbeats.
func (f *fetchSide) Close(it *pullIter) {
	it.Stop()
	f.w.bg.beats.Unwatch(it)
}

// emitPullLost calls the PullLost hooks.
func (w *Worker) emitPullLost(taskType string, prio Priority) {
	for i := range w.hooks {
		if h := w.hooks[i].PullLost; h != nil {
			callHook(w.log, &w.stats.hookPanics, "PullLost", func() { h(context.Background(), taskType, prio) })
		}
	}
}
