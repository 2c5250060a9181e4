package lanes

import (
	"cmp"
	"slices"
	"time"
)

// Awaited is a sequence handed back to the server that a gate waits to be
// delivered again.
type Awaited struct {
	Key   string
	Seq   uint64
	Since time.Time // when it was handed back ([Gate.Done])
}

// KeyStats counts what a gate holds of one key.
type KeyStats struct {
	Key     string
	Waiting int // received, not started
	Running int // started, not done
	Awaited int // handed back, awaited again
}

// Awaiting returns the sequences the gate waits for, longest waiting
// first, for the caller to look up those that take too long (and
// [Gate.Forget] those that will not come back).
func (g *Gate[T]) Awaiting() []Awaited {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []Awaited
	for name, k := range g.keys {
		for _, w := range k.awaited {
			out = append(out, Awaited{Key: name, Seq: w.seq, Since: w.since})
		}
	}
	slices.SortFunc(out, func(a, b Awaited) int {
		return cmp.Or(a.Since.Compare(b.Since), cmp.Compare(a.Seq, b.Seq))
	})
	return out
}

// Queued returns the deliveries received and not started, in stream order:
// the caller keeps them alive on the server (in-progress acks) while they
// wait.
func (g *Gate[T]) Queued() []T {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []entry[T]
	for _, k := range g.keys {
		out = append(out, k.queue...)
	}
	return values(sortBySeq(out))
}

// Keys returns what the gate holds of each key it knows, by key.
func (g *Gate[T]) Keys() []KeyStats {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]KeyStats, 0, len(g.keys))
	for name, k := range g.keys {
		out = append(out, KeyStats{Key: name, Waiting: len(k.queue), Running: len(k.running), Awaited: len(k.awaited)})
	}
	slices.SortFunc(out, func(a, b KeyStats) int { return cmp.Compare(a.Key, b.Key) })
	return out
}

// Held returns how many deliveries the gate holds: queued or running.
func (g *Gate[T]) Held() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.queued + g.running
}

// Status is what a lane's runner holds now, for the worker registry.
type Status struct {
	// Pin is the lane's pin ID while the runner holds the lane, "" when
	// it does not.
	Pin string
	// Open reports whether its gate starts tasks (a new owner's stays
	// closed until the former owner's deliveries are settled).
	Open bool
	// Running counts the tasks started and not settled, Queued those
	// received and waiting behind their key, Awaited those handed back
	// and awaited again; Keys the keys it holds any of.
	Running, Queued, Awaited, Keys int
	// Busiest are the keys holding the most tasks (running and queued),
	// at most [StatusKeys], the busiest first.
	Busiest []KeyStats
}

// StatusKeys bounds the keys a [Status] lists.
const StatusKeys = 8

// Status returns what the runner holds now.
func (r *Runner[P]) Status() Status {
	r.mu.Lock()
	pin := r.pin
	r.mu.Unlock()
	g := r.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	s := Status{Pin: pin, Open: g.state == isOpen, Running: g.running, Queued: g.queued, Keys: len(g.keys)}
	for name, k := range g.keys {
		s.Awaited += len(k.awaited)
		ks := KeyStats{Key: name, Waiting: len(k.queue), Running: len(k.running), Awaited: len(k.awaited)}
		if ks.Waiting+ks.Running == 0 {
			continue
		}
		s.Busiest = append(s.Busiest, ks)
	}
	slices.SortFunc(s.Busiest, func(a, b KeyStats) int {
		return cmp.Or(cmp.Compare(b.Running+b.Waiting, a.Running+a.Waiting), cmp.Compare(a.Key, b.Key))
	})
	if len(s.Busiest) > StatusKeys {
		s.Busiest = s.Busiest[:StatusKeys]
	}
	return s
}

// Holds reports whether the runner holds its lane now: false once the lane
// was lost, until it is pinned to the runner again.
func (r *Runner[P]) Holds() bool {
	g := r.gate
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.state != isLost
}
