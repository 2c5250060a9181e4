package intake

import (
	"github.com/jetflow-io/jetflow/internal/fetch"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/streams"
)

// From a pull buffer to an executor. A fetcher offers its tasks to the
// scheduler, which starts them on executors as slots free up (granted).
// Two direct paths skip the fetch loop while nothing waits for a slot: a
// message that reaches an empty pull buffer while a slot is free starts
// from the subscription (startDirect), and an executor that settled a task
// takes the next one from its buffer (takeBuffered). Every task enters
// execution one way (execute); the ones an executor runs next are returned
// into its loop (Next, LendSlot). The methods that the worker's side of
// the executor takes from the stage (attempt.Worker) are here too.

// offer queues p for a slot; granted starts it.
func (s *Stage[T, X]) offer(p *Pending[T, X]) { s.sched.Offer(p, p.Prio.Rank(), p.Type.Slots) }

// Withdraw removes p from the waiting tasks; false if it was dispatched.
func (s *Stage[T, X]) Withdraw(p *Pending[T, X]) bool { return s.sched.Withdraw(p, p.Prio.Rank()) }

// granted is called by the scheduler, under its lock, when p gets a slot:
// a parked task resumes, a fetched one starts.
func (s *Stage[T, X]) granted(p *Pending[T, X], resumed bool) {
	if !resumed {
		p.dispatched <- struct{}{}
	}
	s.execute(p, !resumed)
}

// execute is the one way of a task into execution: p, which holds a slot,
// runs on an idle executor or a goroutine of its own, in the executor's
// loop, which then runs the tasks that follow it in the same goroutine
// (Next, LendSlot). A fresh task is counted in execs first; a parked one
// resuming still is.
func (s *Stage[T, X]) execute(p *Pending[T, X], fresh bool) {
	if fresh {
		s.execs.Add(1)
	}
	s.pool.Run(p)
}

// Next returns the task to run after p in p's goroutine, giving back p's
// slot unless the task takes it: the next message of p's pull buffer
// (takeBuffered), else the task granted the slot (releaseNext), else nil.
func (s *Stage[T, X]) Next(p *Pending[T, X]) *Pending[T, X] {
	if q := s.takeBuffered(p); q != nil {
		return q
	}
	return s.releaseNext(p)
}

// takeBuffered is the direct path from a pull buffer to an executor: when
// p's execution is over, no task waits for a slot that p's could serve and
// the stage runs, the next message of the buffer p came from starts in
// p's slot and goroutine (nil when there is none). Without it every task
// crosses the fetcher and the scheduler to an idle executor: two goroutine
// wake-ups per task. The rules are the fetcher's: a waiting task (a
// higher priority, a rescued buffer, a held task resuming) goes first; a
// draining or stopped buffer gives nothing; and the message is taken only
// once the slot is settled, else it stays at the head of its buffer, where
// its heartbeats continue.
func (s *Stage[T, X]) takeBuffered(p *Pending[T, X]) *Pending[T, X] {
	f := p.src
	if f == nil || !s.running.Load() {
		return nil
	}
	it := f.Iter()
	if it == nil || s.sched.Contended(p.Type.Slots) {
		return nil
	}
	// The slot passes to the message under the buffer's lock: no other
	// taker (the fetcher) can take a later message meanwhile.
	var q *Pending[T, X]
	if it.TakeIf(func(m *pull.Msg) bool {
		q = bufferedPending[T, X](p.Type, p.Prio, m, f)
		return s.sched.Swap(p, q, p.Type.Slots)
	}) == nil {
		return nil
	}
	return q
}

// startDirect returns the direct path of a pull buffer of (t, prio)
// ([pull.Iter.SetDirect]): a task that arrives at an empty buffer while the
// stage runs, a slot is free for it and no task waits that could take the
// slot starts at once on an idle executor, from the subscription's
// goroutine. Without it the task wakes the fetch loop, which offers it to
// the scheduler, which wakes an executor: one goroutine hand-off more
// between the server and the handler for every task that finds a free slot.
// The rules are takeBuffered's: a waiting task (a higher priority, a
// rescued buffer, a held task resuming) goes first, and a draining or
// stopped buffer gives nothing (the iterator checks; its Drain and Stop wait
// for a call in progress, so a stopping fetcher's hand-back never misses a
// task started here, and the start counts in execs before Drain waits on
// them).
func (s *Stage[T, X]) startDirect(t *Type[T], prio streams.Priority, f *fetch.Feed) func(*pull.Msg) bool {
	return func(m *pull.Msg) bool {
		if !s.running.Load() {
			return false
		}
		p, ok := s.sched.StartNew(t.Slots, func() *Pending[T, X] { return bufferedPending[T, X](t, prio, m, f) })
		if !ok {
			return false
		}
		s.cfg.Counters.StartedDirect.Add(1)
		s.execute(p, true)
		return true
	}
}

// releaseNext gives back p's slot and returns the fetched task granted the
// slot in its place, if any, for the caller to run (granted's work for it
// is done here, outside the scheduler's lock).
func (s *Stage[T, X]) releaseNext(p *Pending[T, X]) *Pending[T, X] {
	next, ok := s.sched.ReleaseTake(p, p.Type.Slots)
	next = s.taken(next, ok) // before Done: the count never touches zero between them
	s.execs.Done()
	return next
}

// taken does granted's work for next, a fetched task the scheduler handed
// to the caller (ok) to run in its own goroutine; nil when there is none.
func (s *Stage[T, X]) taken(next *Pending[T, X], ok bool) *Pending[T, X] {
	if !ok {
		return nil
	}
	s.execs.Add(1)
	next.dispatched <- struct{}{}
	return next
}

// Parked tasks: the executor (internal/attempt) parks a task an extension
// holds for a rerun in process, without spending a delivery, and keeps its
// timer; the stage lends the task's slot to other tasks meanwhile and
// queues it for a slot again when its time is up (decision 036).

// LendSlot marks the parked task p for a rerun and lends its slot; it
// returns the fetched task the slot was granted to, for the caller to run
// in p's place (nil: none).
func (s *Stage[T, X]) LendSlot(p *Pending[T, X]) *Pending[T, X] {
	p.rerun = true
	next, ok := s.sched.LendTake(p.Type.Slots)
	return s.taken(next, ok)
}

// Requeue queues the parked task p for a slot; granted resumes it.
func (s *Stage[T, X]) Requeue(p *Pending[T, X]) { s.sched.Resume(p, p.Prio.Rank(), p.Type.Slots) }

// Reclaim takes the lent slot of the parked task p back and resumes it, to
// be handed back (the worker stops).
func (s *Stage[T, X]) Reclaim(p *Pending[T, X]) {
	s.sched.Unlend(p.Type.Slots)
	s.execute(p, false)
}
