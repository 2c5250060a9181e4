package framework

import (
	"time"

	"github.com/jetflow-io/jetflow/internal/pull"
)

// Pull sizing: how many tasks a fetcher asks the server for at once
// (internal/pull: [pull.Batch] of the handler times a [pull.Pace] measures;
// smaller while higher priorities wait for slots or started tasks within
// [pull.CompeteWindow], [pull.Starts]).

// taskPace is a moving average of a type's handler times and the number of
// times its fetchers resized their pulls.
type taskPace = pull.Pace

// pullSize returns the batch a fetcher of tt at prio should pull now. It
// counts a resize when the size differs from the previous request's.
func (w *Worker) pullSize(tt *typeRunner, prio Priority) int {
	return w.pullSizeAt(tt, prio, time.Now())
}

func (w *Worker) pullSizeAt(tt *typeRunner, prio Priority, now time.Time) int {
	if tt.cfg.prefetchSet {
		return tt.cfg.prefetch
	}
	inFlight := tt.cfg.maxInFlight
	if inFlight == 0 {
		inFlight = DefaultMaxInFlight
	}
	competing := w.higherWaiting(prio) || w.lastStart.HigherRan(prio.Rank(), now)
	batch := pull.Batch(tt.cfg.prefetch, tt.cfg.concurrency, inFlight, tt.pace.Average(), competing)
	tt.pace.LastBatch(batch)
	return batch
}

// higherWaiting reports whether tasks of a higher priority than prio wait
// for a slot on this worker.
func (w *Worker) higherWaiting(prio Priority) bool {
	for r := range prio.Rank() {
		if w.sched.NumWaiting(r) > 0 {
			return true
		}
	}
	return false
}
