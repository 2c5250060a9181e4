package framework

import (
	"sync/atomic"

	"github.com/jetflow-io/jetflow/internal/attempt"
)

// Stats are a worker's counters since it was created. Read them with
// [Worker.Stats]; they are safe to read while the worker runs.
type Stats struct {
	// Started counts handler invocations.
	Started uint64
	// Succeeded counts tasks acked after their handler returned nil.
	Succeeded uint64
	// Retried counts failed attempts handed back for a later retry.
	Retried uint64
	// Failed counts tasks that failed for good (permanent error or last
	// attempt).
	Failed uint64
	// Panics counts recovered handler panics (also counted as failures or retries).
	Panics uint64
	// HandedBack counts tasks returned unfinished at shutdown.
	HandedBack uint64
	// HeldEarly counts delayed tasks that arrived before their due time and
	// were held until it.
	HeldEarly uint64
	// AckErrors counts Ack/Nak/Term/InProgress calls that could not be sent,
	// for tasks and for the advisories of the worker's dead-letter router.
	AckErrors uint64
	// HookPanics counts recovered panics of hooks ([Hooks]).
	HookPanics uint64
	// PullsLost counts pull requests the worker gave up because the
	// server stopped sending their heartbeats (their consumer leader died,
	// the connection was cut) or retired them for a leadership change; each
	// was replaced at once.
	PullsLost uint64
	// DelaysMoved counts delayed tasks this worker's mover turned into
	// schedules; DelaysRejected those it dead-lettered as invalid;
	// DelaysConflicts those it dead-lettered as "conflict" because their
	// ID already had a pending schedule, which it kept ([WithDelayMover]).
	DelaysMoved, DelaysRejected, DelaysConflicts uint64
	// VersionsHandedBack counts tasks handed back, without spending an
	// attempt, because their handler does not accept their payload
	// version ([AcceptVersions]).
	VersionsHandedBack uint64
	// VersionsRedelivered counts tasks of a version their handler does not
	// accept that could not be handed back that way (an ordered task, a
	// cron tick, a worker that may not write schedules) and were
	// redelivered instead, spending an attempt.
	VersionsRedelivered uint64
	// Running is the number of tasks running now.
	Running int
}

type workerStats struct {
	// Counters are the executor's (internal/attempt), with the worker's own
	// hand-backs in HandedBack.
	attempt.Counters
	ackErrors, hookPanics, pullsLost atomic.Uint64
	// startedDirect counts tasks started from the subscription
	// (internal/intake, startDirect).
	startedDirect atomic.Uint64
}

// Stats returns a snapshot of the worker's counters.
func (w *Worker) Stats() Stats {
	running := w.in.NumRunning()
	s := Stats{
		Started:             w.stats.Started.Load(),
		Succeeded:           w.stats.Succeeded.Load(),
		Retried:             w.stats.Retried.Load(),
		Failed:              w.stats.Failed.Load(),
		Panics:              w.stats.Panics.Load(),
		HandedBack:          w.stats.HandedBack.Load(),
		HeldEarly:           w.stats.HeldEarly.Load(),
		AckErrors:           w.stats.ackErrors.Load(),
		HookPanics:          w.stats.hookPanics.Load(),
		PullsLost:           w.stats.pullsLost.Load(),
		VersionsHandedBack:  w.versions.Back.Load(),
		VersionsRedelivered: w.versions.Redelivered.Load(),
		Running:             running,
	}
	if w.mover != nil {
		s.DelaysMoved, s.DelaysRejected, s.DelaysConflicts = w.mover.Moved.Load(), w.mover.Rejects.Load(), w.mover.Conflicts.Load()
	}
	return s
}
