package dispatch

import (
	"math/rand/v2"
	"sync"
)

// Ranks is the number of priority ranks; rank 0 is the highest.
const Ranks = 4

// Class caps how many items of one kind hold a slot at once. Its count is
// guarded by the scheduler's lock.
type Class struct{ free int }

// NewClass returns a class allowing limit items at once.
func NewClass(limit int) *Class { return &Class{free: limit} }

type entry[T comparable] struct {
	v       T
	class   *Class
	resumed bool
}

// Scheduler grants slots to waiting items. It is safe for concurrent use.
type Scheduler[T comparable] struct {
	mu       sync.Mutex
	free     int
	waiting  [Ranks][]entry[T]
	inflight map[T]struct{}
	weights  [Ranks]int
	weighted bool
	grant    func(v T, resumed bool)
}

// New returns a scheduler of slots slots. With weighted, ranks are drawn in
// proportion to weights; otherwise the highest waiting rank always goes
// first. grant is called, with the scheduler's lock held, for each item
// given a slot: resumed says the item was queued with [Scheduler.Resume]
// (it was set aside and continues) rather than [Scheduler.Offer].
func New[T comparable](slots int, weighted bool, weights [Ranks]int, grant func(v T, resumed bool)) *Scheduler[T] {
	return &Scheduler[T]{free: slots, inflight: make(map[T]struct{}), weights: weights, weighted: weighted, grant: grant}
}

// Offer queues v at rank for a slot of class c and grants what can start.
func (s *Scheduler[T]) Offer(v T, rank int, c *Class) { s.queue(v, rank, c, false) }

// Resume queues v, which still counts as holding a slot (see
// [Scheduler.Lend]), for a slot again.
func (s *Scheduler[T]) Resume(v T, rank int, c *Class) { s.queue(v, rank, c, true) }

func (s *Scheduler[T]) queue(v T, rank int, c *Class, resumed bool) {
	s.mu.Lock()
	s.waiting[rank] = append(s.waiting[rank], entry[T]{v, c, resumed})
	s.dispatchLocked()
	s.mu.Unlock()
}

// Withdraw removes v from the waiting items; false if it was granted a
// slot meanwhile.
func (s *Scheduler[T]) Withdraw(v T, rank int) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range s.waiting[rank] {
		if e.v == v {
			s.waiting[rank] = append(s.waiting[rank][:i], s.waiting[rank][i+1:]...)
			return true
		}
	}
	return false
}

// Release gives back the slot of v, of class c, and grants what can start.
func (s *Scheduler[T]) Release(v T, c *Class) {
	s.mu.Lock()
	delete(s.inflight, v)
	s.free++
	c.free++
	s.dispatchLocked()
	s.mu.Unlock()
}

// ReleaseTake is [Scheduler.Release], except that the first item it grants
// that was queued with [Scheduler.Offer] is returned (ok) instead of being
// passed to grant: the caller starts it itself, in the goroutine that ran v,
// which saves handing it to another goroutine. Items queued with
// [Scheduler.Resume] are granted as usual.
func (s *Scheduler[T]) ReleaseTake(v T, c *Class) (next T, ok bool) {
	s.mu.Lock()
	delete(s.inflight, v)
	s.free++
	c.free++
	next, ok = s.dispatchTakeLocked(true)
	s.mu.Unlock()
	return next, ok
}

// Swap hands the slot of v, of class c, to w, which starts at once in v's
// place (w was never queued), unless an item waits that could take the slot
// if v released it: then it changes nothing and returns false, and the
// caller releases v as usual ([Scheduler.ReleaseTake]). It keeps the order
// of [Scheduler.Offer]: a waiting item always goes before an item that was
// not queued.
func (s *Scheduler[T]) Swap(v, w T, c *Class) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.contendedLocked(c) {
		return false
	}
	delete(s.inflight, v)
	s.inflight[w] = struct{}{}
	return true
}

// StartNew starts an item that was never queued, of class c, when a slot
// is free for it: mk makes the item (under the lock, only then), which holds
// its slot at once, as a granted one does, without grant being called.
// Otherwise it returns false and calls nothing. It keeps the order of
// [Scheduler.Offer], a waiting item always going first, because a slot is
// free only when no waiting item can take it: every change that frees one
// grants it at once.
func (s *Scheduler[T]) StartNew(c *Class, mk func() T) (v T, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.free <= 0 || c.free <= 0 {
		return v, false
	}
	v = mk()
	s.free--
	c.free--
	s.inflight[v] = struct{}{}
	return v, true
}

// Contended reports whether an item waits that could take a slot of class
// c if one was released: what makes [Scheduler.Swap] refuse.
func (s *Scheduler[T]) Contended(c *Class) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contendedLocked(c)
}

func (s *Scheduler[T]) contendedLocked(c *Class) bool {
	for r := range s.waiting {
		for _, e := range s.waiting[r] {
			if e.class == c || e.class.free > 0 {
				return true
			}
		}
	}
	return false
}

// Lend lets others use the slot of an item of class c that keeps holding
// it (it stays among the items [Scheduler.Each] visits); [Scheduler.Resume]
// queues the item for a slot again, or [Scheduler.Unlend] takes the slot
// back without waiting.
func (s *Scheduler[T]) Lend(c *Class) { s.lend(c, false) }

// LendTake is [Scheduler.Lend], except that the first item it grants that
// was queued with [Scheduler.Offer] is returned (ok) instead of being
// passed to grant, as [Scheduler.ReleaseTake] does: the goroutine that set
// the lending item aside runs it.
func (s *Scheduler[T]) LendTake(c *Class) (next T, ok bool) { return s.lend(c, true) }

func (s *Scheduler[T]) lend(c *Class, take bool) (next T, ok bool) {
	s.mu.Lock()
	s.free++
	c.free++
	next, ok = s.dispatchTakeLocked(take)
	s.mu.Unlock()
	return next, ok
}

// Unlend undoes [Scheduler.Lend], so that a later [Scheduler.Release]
// balances.
func (s *Scheduler[T]) Unlend(c *Class) {
	s.mu.Lock()
	s.free--
	c.free--
	s.mu.Unlock()
}

// Running returns the items holding a slot.
func (s *Scheduler[T]) Running() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]T, 0, len(s.inflight))
	for v := range s.inflight {
		out = append(out, v)
	}
	return out
}

// NumRunning returns how many items hold a slot.
func (s *Scheduler[T]) NumRunning() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.inflight)
}

// NumWaiting returns how many items wait at rank.
func (s *Scheduler[T]) NumWaiting(rank int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiting[rank])
}

// Each calls fn, with the lock held, for every item holding a slot, then
// every waiting one. fn must not call the scheduler.
func (s *Scheduler[T]) Each(fn func(T)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for v := range s.inflight {
		fn(v)
	}
	for r := range s.waiting {
		for _, e := range s.waiting[r] {
			fn(e.v)
		}
	}
}

// dispatchLocked grants slots while some are free.
func (s *Scheduler[T]) dispatchLocked() { s.dispatchTakeLocked(false) }

// dispatchTakeLocked grants slots while some are free; with take, the first
// item granted that was offered is returned instead of passed to grant.
func (s *Scheduler[T]) dispatchTakeLocked(take bool) (taken T, ok bool) {
	for s.free > 0 {
		r, i := s.pickLocked()
		if r < 0 {
			return taken, ok
		}
		e := s.waiting[r][i]
		s.waiting[r] = append(s.waiting[r][:i], s.waiting[r][i+1:]...)
		s.free--
		e.class.free--
		s.inflight[e.v] = struct{}{}
		if take && !ok && !e.resumed {
			taken, ok = e.v, true
			continue
		}
		s.grant(e.v, e.resumed)
	}
	return taken, ok
}

// pickLocked returns the rank and index of the next item to start, or -1.
func (s *Scheduler[T]) pickLocked() (int, int) {
	var idx [Ranks]int
	eligible, total := 0, 0
	for r := range s.waiting {
		idx[r] = -1
		for i, e := range s.waiting[r] {
			if e.class.free > 0 {
				idx[r] = i
				break
			}
		}
		if idx[r] < 0 {
			continue
		}
		if !s.weighted {
			return r, idx[r]
		}
		eligible++
		total += s.weights[r]
	}
	if eligible == 0 {
		return -1, -1
	}
	n := rand.IntN(total)
	for r := range s.waiting {
		if idx[r] < 0 {
			continue
		}
		if n < s.weights[r] {
			return r, idx[r]
		}
		n -= s.weights[r]
	}
	return -1, -1
}
