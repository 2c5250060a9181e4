package pull

import (
	"sync/atomic"
	"time"
)

// CompeteWindow is how long after a task of a higher priority started on a
// worker its lower priorities keep pulling small batches.
//
// The messages a pull request brings travel on the worker's connection in
// the order the server sends them: a critical task stored just after a low
// pull of 250 was answered reaches the worker behind those 250 (measured
// behind a busy low backlog: up to 250 low deliveries ahead of a critical
// one at p90 with full batches, about 20 with batches of the slots). So
// while higher priorities are active, not only while one waits for a slot,
// a lower priority pulls its default batch (decision 028).
const CompeteWindow = time.Second

// startStampEvery is the resolution of the start stamps.
const startStampEvery = 10 * time.Millisecond

// Starts holds, per priority rank (0 the highest), when a task of that
// priority last started on the worker, to startStampEvery. It is safe for
// concurrent use.
type Starts struct{ at []atomic.Int64 }

// NewStarts returns the start stamps of ranks priorities.
func NewStarts(ranks int) *Starts { return &Starts{at: make([]atomic.Int64, ranks)} }

// Stamp records that a task of rank started at start. A stamp is written
// at most every few milliseconds per rank, so executors do not all write
// one cache line for every task.
func (s *Starts) Stamp(rank int, start time.Time) {
	a := &s.at[rank]
	if ns := start.UnixNano(); ns-a.Load() > int64(startStampEvery) {
		a.Store(ns)
	}
}

// HigherRan reports whether a task of a higher priority than rank started
// within CompeteWindow before now.
func (s *Starts) HigherRan(rank int, now time.Time) bool {
	since := now.Add(-CompeteWindow).UnixNano()
	for r := range rank {
		if s.at[r].Load() > since {
			return true
		}
	}
	return false
}
