package pull

import (
	"sync/atomic"
	"time"
)

// Pull sizing: how many tasks a fetcher asks the server for at once.
//
// A task waiting in the pull buffer costs nothing to the handlers but is
// already on its ack clock (the worker's sweeper beats it: [Iter.BeatQueued]),
// and cannot run on another worker; a small pull costs a round trip (and, over TCP, syscalls) per few
// tasks. Short tasks with a deep backlog want large pulls; slow tasks, or a
// lower priority held back by higher ones, want the pull no larger than the
// slots. Unless the type set a fixed prefetch, the fetcher starts at the
// default (the type's concurrency, at most framework.MaxPrefetch) and sizes
// each pull request ([Iter]) by [Batch] of the handler time measured so far.
// The fetcher sends its own pull requests, one outstanding at a time, so a
// new size applies to the next request and nothing in flight is dropped.

// Sizing constants.
const (
	// bufferWork is the handler time the buffer may hold per slot
	// beyond the slots themselves: a task pulled behind a full buffer
	// starts within about this long.
	bufferWork = 20 * time.Millisecond
	// MaxAuto bounds automatic pulls: nats.go's default batch.
	MaxAuto = 500
)

// Batch returns the pull batch for a type whose fetchers start at base
// (its default prefetch), with concurrency slots, at most maxInFlight tasks
// in flight on its consumer, handlers taking avg on average (0: not
// measured yet), and competing set when higher priorities compete on this
// worker (the framework sets it while they hold tasks waiting for slots or
// ran a task within the last second).
func Batch(base, concurrency, maxInFlight int, avg time.Duration, competing bool) int {
	if avg <= 0 || competing {
		return base
	}
	n := MaxAuto
	if extra := int64(bufferWork) * int64(concurrency) / int64(avg); extra < int64(MaxAuto) {
		n = concurrency + int(extra)
	}
	// Leave half the consumer's in-flight cap to other workers.
	n = min(n, MaxAuto, max(maxInFlight/2, 1))
	return max(n, base)
}

// Pace is a moving average of a type's handler times, updated by every
// execution without a lock (a lost update only delays the average), and the
// number of times its fetchers resized their pulls.
type Pace struct {
	avg       atomic.Int64 // nanoseconds; 0 until the first observation
	lastBatch atomic.Int64 // size of the last pull request (any priority)
	resizes   atomic.Uint64
}

// Observe adds one handler time, weighing it 1/16.
func (p *Pace) Observe(d time.Duration) {
	d = max(d, 1)
	old := p.avg.Load()
	if old == 0 {
		p.avg.Store(int64(d))
		return
	}
	p.avg.Store(old + (int64(d)-old)/16)
}

// Average returns the moving average, 0 before any observation.
func (p *Pace) Average() time.Duration { return time.Duration(p.avg.Load()) }

// LastBatch records the size of a pull request and counts a resize when it
// differs from the previous one.
func (p *Pace) LastBatch(batch int) {
	if last := p.lastBatch.Swap(int64(batch)); last != 0 && last != int64(batch) {
		p.resizes.Add(1)
	}
}

// Resizes returns how many times the pull size changed.
func (p *Pace) Resizes() uint64 { return p.resizes.Load() }
