package staterec

import (
	"context"
	"sync"
	"time"
)

// The states a record holds (framework.TaskState's values).
const (
	Pending   = "pending"
	Scheduled = "scheduled"
	Running   = "running"
	Retrying  = "retrying"
	Succeeded = "succeeded"
	Failed    = "failed"
	Dead      = "dead"
	Cancelled = "cancelled"
)

// Enqueued writes the first record of a new task: "pending", or
// "scheduled" when rec.ScheduledFor is set, stored only if the task has no
// record yet (a worker may have written one first).
func (sw *Writer) Enqueued(rec Record) {
	now := time.Now().UTC()
	rec.State, rec.EnqueuedAt, rec.UpdatedAt = Pending, now, now
	if !rec.ScheduledFor.IsZero() {
		rec.State, rec.ScheduledFor, rec.Sequence = Scheduled, rec.ScheduledFor.UTC(), 0
	}
	sw.Write(rec.ID, rec.AppendJSON(make([]byte, 0, 256)), true)
}

// Tracker writes a worker's task records as attempts start and end. Its
// configuration is fixed when it is built; it is safe for concurrent use.
//
// Tasks of tracked types get every record. A task of another type gets
// records only when it asks for them: its handler reports progress or sets
// a result, or it was enqueued to be awaited. Such a task gets its progress
// records and its final record, and nothing else; the state bucket is
// ensured the first time one asks ([Tracker.Ready]).
type Tracker struct {
	w            *Writer
	runningAfter time.Duration
	tracked      map[string]bool // by task type

	// ensure creates the state bucket; ready is set once it succeeded.
	ensure  func(ctx context.Context) error
	readyMu sync.Mutex
	ready   bool
}

// NewTracker returns a tracker writing with w the records of the task
// types tracked, writing an attempt's "running" record once it ran for
// runningAfter (at once when 0). ensure creates the state bucket when a
// task of an untracked type first asks for records; nil means the bucket
// exists.
func NewTracker(w *Writer, runningAfter time.Duration, tracked map[string]bool, ensure func(ctx context.Context) error) *Tracker {
	return &Tracker{w: w, runningAfter: runningAfter, tracked: tracked, ensure: ensure, ready: ensure == nil}
}

// Tracked reports whether tasks of taskType get records; false on a nil
// Tracker.
func (tr *Tracker) Tracked(taskType string) bool { return tr != nil && tr.tracked[taskType] }

// Ready makes sure the state bucket exists, creating it the first time it
// is called (one round trip per worker); a failed attempt is tried again
// by the next call.
func (tr *Tracker) Ready(ctx context.Context) error {
	tr.readyMu.Lock()
	defer tr.readyMu.Unlock()
	if tr.ready {
		return nil
	}
	if err := tr.ensure(ctx); err != nil {
		return err
	}
	tr.ready = true
	return nil
}

// Started writes the "running" record of the attempt described by rec (its
// identity and attempt), now or, unless a finishes first, once it ran for
// the tracker's running-after delay.
func (tr *Tracker) Started(rec Record, a *Attempt) {
	start := time.Now().UTC()
	a.mu.Lock()
	a.start = start
	a.mu.Unlock()
	running := func() { // a.mu is held
		r := rec
		r.State, r.StartedAt, r.UpdatedAt, r.Progress = Running, start, time.Now().UTC(), a.progress
		tr.w.Write(r.ID, r.AppendJSON(make([]byte, 0, 256)), false)
	}
	if tr.runningAfter == 0 {
		a.mu.Lock()
		a.wrote = true
		running()
		a.mu.Unlock()
		return
	}
	a.Started(tr.runningAfter, running)
}

// Progress keeps p as the latest progress of the attempt described by rec,
// and writes it in a "running" record at most every [ProgressInterval]
// (see [Attempt.Report]). It does not wait for the server.
func (tr *Tracker) Progress(rec Record, a *Attempt, p Progress) {
	a.Report(p, ProgressInterval, func(p Progress) { // a.mu is held
		r := rec
		r.State, r.StartedAt, r.UpdatedAt, r.Progress = Running, a.start, time.Now().UTC(), p
		tr.w.Write(r.ID, r.AppendJSON(make([]byte, 0, 320)), false)
	})
}

// Outcome is how an attempt ended, for its final record.
type Outcome struct {
	// State is Succeeded, Retrying, Failed or Dead.
	State string
	// Error is the attempt's error text, already bounded; Took how long it
	// ran; Delay when a retrying task runs again.
	Error       string
	Took, Delay time.Duration
}

// Finished writes the record of an attempt's outcome o, after its
// "running" or progress record if one is being written, keeping the last
// progress reported. With confirm, a final record is written with
// [Writer.WriteConfirmed]. a may be nil.
func (tr *Tracker) Finished(rec Record, a *Attempt, o Outcome, confirm bool) {
	now := time.Now().UTC()
	rec.State, rec.UpdatedAt = o.State, now
	switch o.State {
	case Succeeded:
		rec.StartedAt, rec.FinishedAt = now.Add(-o.Took), now
		if a != nil {
			rec.Result = a.Result
		}
	case Retrying:
		rec.Error, rec.NextAttemptAt = o.Error, now.Add(o.Delay)
	default:
		rec.Error, rec.FinishedAt = o.Error, now
	}
	a.Finished() // after the "running" record, if one is being written
	rec.Progress = a.Progress()
	data := rec.AppendJSON(make([]byte, 0, 256))
	if confirm && o.State != Retrying {
		tr.w.WriteConfirmed(rec.ID, data)
		return
	}
	tr.w.Write(rec.ID, data, false)
}
