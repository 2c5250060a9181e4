package staterec

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/textcut"
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

// MaxError bounds the error text of a record.
const MaxError = 1024

// ReadyTimeout bounds the creation of the state bucket when a task of an
// untracked type first asks for records.
const ReadyTimeout = 10 * time.Second

// Begin starts the records of an attempt of rec's task, as [StartOf] says:
// a tracked task's "running" record (on state(), the attempt's tracking
// state), or for a task of an untracked type enqueued to be awaited, the
// state bucket its final record needs ([Tracker.Asked]).
func (tr *Tracker) Begin(ctx context.Context, rec Record, awaited bool, state func() *Attempt) error {
	tracked := tr.Tracked(rec.Type)
	switch StartOf(tracked, !tracked && awaited) {
	case StartRecords:
		tr.Started(rec, state())
	case StartEnsure:
		return tr.Asked(ctx, rec)
	}
	return nil
}

// Asked makes sure the state bucket exists before a task of an untracked
// type writes records it asked for (progress, a result, a final record
// to be awaited): the first such task of a worker creates it, within
// ReadyTimeout.
func (tr *Tracker) Asked(ctx context.Context, rec Record) error {
	if tr.Tracked(rec.Type) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	if err := tr.Ready(ctx); err != nil {
		return fmt.Errorf("task %s: cannot store its state record: %w", rec.ID, err)
	}
	return nil
}

// End writes the record of an attempt's outcome o when [FinishOf] says it
// gets one: every outcome of a tracked task; the final outcome of a task
// of an untracked type that asked for records (a is not nil) or is
// awaited, and its retry when a record of the attempt was written. The
// text of err, cut to MaxError bytes, is the record's error. a may be nil.
func (tr *Tracker) End(rec Record, awaited bool, a *Attempt, o Outcome, err error) {
	tracked := tr.Tracked(rec.Type)
	// Wrote takes the attempt's lock: look it up only where it counts.
	wrote := !tracked && o.State == Retrying && a.Wrote()
	write, confirm := FinishOf(o.State, tracked, awaited, a != nil, wrote)
	if !write {
		return
	}
	if err != nil {
		o.Error = textcut.Cut(err.Error(), MaxError)
	}
	tr.Finished(rec, a, o, confirm)
}

// Routed writes the "dead" record of a task that a router or reconciler
// dead-lettered (its own worker died on the last delivery, or could not
// settle it), when its type is tracked or it was awaited: otherwise its
// record would stay "running", and a wait on it would last until its
// deadline. Nothing is written for an ID that is not valid ([taskmsg.SafeID]:
// the task came from the wire) nor by a nil Tracker.
func (tr *Tracker) Routed(rec Record, awaited bool, cause string) {
	if tr == nil || !taskmsg.SafeID(rec.ID) || !tr.Tracked(rec.Type) && !awaited {
		return
	}
	tr.Finished(rec, nil, Outcome{State: Dead, Error: textcut.Cut(cause, MaxError)}, true)
}
