package framework

import (
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/streams"
)

// Pull sizing: how many tasks a fetcher asks the server for at once
// (internal/pull: [pull.Batch] of the handler times a [pull.Pace] measures).

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
	competing := w.higherWaiting(prio) || w.higherRan(prio, now)
	batch := pull.Batch(tt.cfg.prefetch, tt.cfg.concurrency, inFlight, tt.pace.Average(), competing)
	tt.pace.LastBatch(batch)
	return batch
}

// competeWindow is how long after a task of a higher priority started on a
// worker its lower priorities keep pulling small batches.
//
// The messages a pull request brings travel on the worker's connection in
// the order the server sends them: a critical task stored just after a low
// pull of 250 was answered reaches the worker behind those 250 (measured
// behind a busy low backlog: up to 250 low deliveries ahead of a critical
// one at p90 with full batches, about 20 with batches of the slots). So
// while higher priorities are active, not only while one waits for a slot,
// a lower priority pulls its default batch.
const competeWindow = time.Second

// higherRan reports whether a task of a higher priority than prio started
// on this worker within competeWindow before now.
func (w *Worker) higherRan(prio Priority, now time.Time) bool {
	since := now.Add(-competeWindow).UnixNano()
	for r := range prio.Rank() {
		if w.lastStart[r].Load() > since {
			return true
		}
	}
	return false
}

// stampStart records that a task of prio started at start (for higherRan).
// The stamp is written at most every few milliseconds per priority, so
// executors do not all write one cache line for every task.
func (w *Worker) stampStart(prio Priority, start time.Time) {
	s := &w.lastStart[prio.Rank()]
	if ns := start.UnixNano(); ns-s.Load() > int64(startStampEvery) {
		s.Store(ns)
	}
}

// startStampEvery is the resolution of the start stamps of higherRan.
const startStampEvery = 10 * time.Millisecond

// lastStarts holds, per priority rank, when a task of that priority last
// started on the worker (Unix nanoseconds, to startStampEvery).
type lastStarts = [streams.NumPriorities]atomic.Int64

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
