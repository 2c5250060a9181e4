package framework

import (
	"log/slog"
	"time"
)

// Held tasks, the worker's side: the executor (internal/attempt) parks a
// task an extension holds (Plugin.Hold) for a rerun in process, without
// spending a delivery, and keeps its timer; the worker lends the task's
// slot to other tasks meanwhile and queues it for a slot again when its
// time is up (decision 036).

// Lend logs the held task p, marks it for a rerun and lends its slot; it
// returns the fetched task the slot was granted to, for the caller to run
// in p's place (nil: none).
func (x *execSide) Lend(p *pending, d time.Duration, cause error) *pending {
	p.task.Logger().Info("jetflow task held in process", slog.Any(LogKeyError, cause), slog.Duration("rerun_in", d))
	p.rerun = true
	next, ok := x.sched.LendTake(p.tt.slots)
	return (*Worker)(x).taken(next, ok)
}

// Requeue queues the parked task p for a slot; granted resumes it.
func (x *execSide) Requeue(p *pending) { x.sched.Resume(p, p.prio.Rank(), p.tt.slots) }

// Withdraw removes p from the waiting tasks; false if it was dispatched.
func (x *execSide) Withdraw(p *pending) bool { return (*Worker)(x).withdraw(p) }

// Reclaim takes the lent slot of the parked task p back and resumes it, to
// be handed back (the worker stops).
func (x *execSide) Reclaim(p *pending) {
	x.sched.Unlend(p.tt.slots)
	(*Worker)(x).execute(p, false)
}
