package liveness

import (
	"sync"
	"sync/atomic"
	"time"
)

// Loops records the state of a worker's fetch loops, by consumer name.
// The zero value is ready to use; it is safe for concurrent use.
type Loops struct {
	mu    sync.Mutex
	loops map[string]*Loop
}

// Loop is the record of one fetch loop: when it last heard from its pull,
// and whether it waits for a free handler slot. Its methods are safe for
// concurrent use and allocate nothing.
type Loop struct {
	polled atomic.Int64 // Unix nanoseconds
	busy   atomic.Bool
	// busySeen is when the stall watchdog last saw the loop busy (Unix
	// nanoseconds): waiting for a slot is no stall, so the clock restarts
	// from there, without a clock read per task on the fetch path.
	busySeen atomic.Int64
}

// Loop returns the record of the fetch loop of consumer name, creating it.
func (h *Loops) Loop(name string) *Loop {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.loops == nil {
		h.loops = make(map[string]*Loop)
	}
	l := h.loops[name]
	if l == nil {
		l = &Loop{}
		h.loops[name] = l
	}
	return l
}

// Poll notes that the loop heard from its pull at t; an earlier t than the
// last one noted changes nothing.
func (l *Loop) Poll(t time.Time) {
	ns := t.UnixNano()
	for {
		old := l.polled.Load()
		if ns <= old || l.polled.CompareAndSwap(old, ns) {
			return
		}
	}
}

// SetBusy notes whether the loop waits for a free handler slot.
func (l *Loop) SetBusy(busy bool) { l.busy.Store(busy) }

// Busy reports whether the loop waits for a free handler slot.
func (l *Loop) Busy() bool { return l.busy.Load() }

// LastPoll returns when the loop last heard from its pull; zero before the
// first time.
func (l *Loop) LastPoll() time.Time {
	if ns := l.polled.Load(); ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// Stalled returns a fetch loop that has not polled for longer than limit
// (counting from start when it never polled) and is not busy.
func (h *Loops) Stalled(now, start time.Time, limit time.Duration) (string, time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, l := range h.loops {
		if l.busy.Load() {
			l.busySeen.Store(now.UnixNano())
			continue
		}
		last := start
		if ns := max(l.polled.Load(), l.busySeen.Load()); ns > 0 {
			last = time.Unix(0, ns)
		}
		if since := now.Sub(last); since > limit {
			return name, since, true
		}
	}
	return "", 0, false
}

// Watch checks the loops for a stall beyond limit, a few times per limit,
// until stop is closed (ok false) or a loop stalled (ok true, with the
// loop's consumer name and how long it has been silent). It checks only
// while running reports true; start returns when the worker started.
func (h *Loops) Watch(stop <-chan struct{}, limit time.Duration, running func() bool, start func() time.Time) (name string, since time.Duration, ok bool) {
	tick := time.NewTicker(min(max(limit/4, 10*time.Millisecond), 5*time.Second))
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return "", 0, false
		case now := <-tick.C:
			if !running() {
				continue
			}
			if name, since, ok := h.Stalled(now, start(), limit); ok {
				return name, since, true
			}
		}
	}
}
