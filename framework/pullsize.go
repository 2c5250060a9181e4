package framework

import (
	"sync/atomic"
	"time"
)

// Pull sizing: how many tasks a fetcher asks the server for at once.
//
// A task waiting in the pull buffer costs nothing to the handlers but is
// already on its ack clock, gets no heartbeat, and cannot run on another
// worker; a small pull costs a round trip (and, over TCP, syscalls) per few
// tasks. Short tasks with a deep backlog want large pulls; slow tasks, or a
// lower priority held back by higher ones, want the pull no larger than the
// slots. Unless the type set [WithPrefetch], the fetcher starts at the
// default (the type's concurrency, at most [MaxPrefetch]) and sizes each
// pull request (pull.go) by [pullBatch] of the handler time measured so far.
// The fetcher sends its own pull requests, one outstanding at a time, so a
// new size applies to the next request and nothing in flight is dropped.

// Sizing constants.
const (
	// pullBufferWork is the handler time the buffer may hold per slot
	// beyond the slots themselves: a task pulled behind a full buffer
	// starts within about this long.
	pullBufferWork = 20 * time.Millisecond
	// maxAutoPull bounds automatic pulls: nats.go's default batch.
	maxAutoPull = 500
)

// pullBatch returns the pull batch for a type whose fetchers start at base
// (its default prefetch), with concurrency slots, at most maxInFlight tasks
// in flight on its consumer, handlers taking avg on average (0: not
// measured yet), and competing set when higher priorities hold tasks waiting
// for slots on this worker.
func pullBatch(base, concurrency, maxInFlight int, avg time.Duration, competing bool) int {
	if avg <= 0 || competing {
		return base
	}
	n := maxAutoPull
	if extra := int64(pullBufferWork) * int64(concurrency) / int64(avg); extra < int64(maxAutoPull) {
		n = concurrency + int(extra)
	}
	// Leave half the consumer's in-flight cap to other workers.
	n = min(n, maxAutoPull, max(maxInFlight/2, 1))
	return max(n, base)
}

// taskPace is a moving average of a type's handler times, updated by every
// execution without a lock (a lost update only delays the average), and the
// number of times its fetchers resized their pulls.
type taskPace struct {
	avg       atomic.Int64 // nanoseconds; 0 until the first observation
	lastBatch atomic.Int64 // size of the last pull request (any priority)
	resizes   atomic.Uint64
}

// observe adds one handler time, weighing it 1/16.
func (p *taskPace) observe(d time.Duration) {
	d = max(d, 1)
	old := p.avg.Load()
	if old == 0 {
		p.avg.Store(int64(d))
		return
	}
	p.avg.Store(old + (int64(d)-old)/16)
}

// average returns the moving average, 0 before any observation.
func (p *taskPace) average() time.Duration { return time.Duration(p.avg.Load()) }

// pullSize returns the batch a fetcher of tt at prio should pull now. It
// counts a resize when the size differs from the previous request's.
func (w *Worker) pullSize(tt *typeRunner, prio Priority) int {
	if tt.cfg.prefetchSet {
		return tt.cfg.prefetch
	}
	inFlight := tt.cfg.maxInFlight
	if inFlight == 0 {
		inFlight = DefaultMaxInFlight
	}
	batch := pullBatch(tt.cfg.prefetch, tt.cfg.concurrency, inFlight, tt.pace.average(), w.higherWaiting(prio))
	if last := tt.pace.lastBatch.Swap(int64(batch)); last != 0 && last != int64(batch) {
		tt.pace.resizes.Add(1)
	}
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
