package staterec

import "time"

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
type Tracker struct {
	w            *Writer
	runningAfter time.Duration
	tracked      map[string]bool // by task type
}

// NewTracker returns a tracker writing with w the records of the task
// types tracked, writing an attempt's "running" record once it ran for
// runningAfter (at once when 0).
func NewTracker(w *Writer, runningAfter time.Duration, tracked map[string]bool) *Tracker {
	return &Tracker{w: w, runningAfter: runningAfter, tracked: tracked}
}

// Tracked reports whether tasks of taskType get records; false on a nil
// Tracker.
func (tr *Tracker) Tracked(taskType string) bool { return tr != nil && tr.tracked[taskType] }

// Started writes the "running" record of the attempt described by rec (its
// identity and attempt), now or, unless a finishes first, once it ran for
// the tracker's running-after delay.
func (tr *Tracker) Started(rec Record, a *Attempt) {
	start := time.Now().UTC()
	running := func() {
		r := rec
		r.State, r.StartedAt, r.UpdatedAt = Running, start, time.Now().UTC()
		tr.w.Write(r.ID, r.AppendJSON(make([]byte, 0, 256)), false)
	}
	if tr.runningAfter == 0 {
		running()
		return
	}
	a.Started(tr.runningAfter, running)
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
// "running" record if one is being written. a may be nil.
func (tr *Tracker) Finished(rec Record, a *Attempt, o Outcome) {
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
	tr.w.Write(rec.ID, rec.AppendJSON(make([]byte, 0, 256)), false)
}
