package framework

import "time"

// Held tasks. An extension (a breaker, a rate limit, a blocked ordering
// key) may have a failed attempt rerun in process later, without spending a
// delivery (Plugin.Hold). The task is parked: its slot is lent to other
// tasks (the goroutine that ran it goes on with the task the slot is
// granted to), and a timer (internal/exec.Parking) queues it for a slot again. No goroutine waits
// for it, so an outage that holds thousands of tasks costs a timer each,
// not a goroutine and its stack. A parked task stays among the scheduler's
// running items, so the heartbeat sweeper keeps it alive, and it still
// counts in execs, so Shutdown waits for it: stopping the worker hands every
// parked task back at once (stopParked).

// park sets p aside for d and returns the fetched task its lent slot was
// granted to, for the caller to run in its place (nil: none). When the
// worker stopped meanwhile, p is resumed at once instead, and hands itself
// back.
func (w *Worker) park(p *pending, d time.Duration) *pending {
	p.rerun = true
	next, ok := w.sched.LendTake(p.tt.slots)
	if !w.held.Park(p, d, w.unpark) {
		w.resumeStopped(p)
	}
	return w.taken(next, ok)
}

// unpark queues the parked task p for a slot once its time is up; granted
// resumes it. A worker that stopped meanwhile takes it back (below, or in
// stopParked, whichever withdraws it from the queue).
func (w *Worker) unpark(p *pending) {
	w.sched.Resume(p, p.prio.Rank(), p.tt.slots)
	if w.stopping() && w.withdraw(p) {
		w.resumeStopped(p)
	}
}

// stopParked resumes every parked task so that it hands itself back; it
// runs once the worker stopped fetching. A task whose timer fired already is
// taken out of the scheduler's queue, or, if it is not there yet, by
// unpark itself; a granted one hands itself back when it resumes.
func (w *Worker) stopParked() {
	w.held.Stop(func(p *pending, stopped bool) {
		if stopped || w.withdraw(p) {
			w.resumeStopped(p)
		}
	})
}

// resumeStopped takes the lent slot of the parked task p back and resumes
// it, to be handed back (the worker stops).
func (w *Worker) resumeStopped(p *pending) {
	w.sched.Unlend(p.tt.slots)
	w.execute(p, false)
}

// stopping reports whether the worker stopped fetching.
func (w *Worker) stopping() bool {
	select {
	case <-w.stopFetch:
		return true
	default:
		return false
	}
}
