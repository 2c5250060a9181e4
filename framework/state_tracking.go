package framework

import (
	"context"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/internal/staterec"
)

// How clients and workers write task state records: the client after each
// enqueue, the worker through its extension events (started, finished).

// installClientState gives c its state writer when state tracking was
// turned on for it: it writes "pending" and "scheduled" records after each
// enqueue (see Client.enqueued).
func (c *Client) installClientState() {
	if !c.opts.stateEnabled {
		return
	}
	sw, err := newStateWriter(c.nc, c.names, c.opts.logger)
	if err != nil {
		c.opts.logger.Warn("jetflow state tracking disabled", slog.Any(LogKeyError, err))
		return
	}
	c.stateWriter = sw
}

// writeEnqueued writes the "pending" or "scheduled" record of a new task.
func (c *Client) writeEnqueued(info TaskInfo) {
	if c.stateWriter == nil || info.Duplicate {
		return
	}
	now := time.Now().UTC()
	rec := TaskRecord{ID: info.ID, Type: info.Type, Priority: info.Priority, State: StatePending,
		Sequence: info.Sequence, EnqueuedAt: now, UpdatedAt: now}
	if !info.ScheduledFor.IsZero() {
		rec.State, rec.ScheduledFor, rec.Sequence = StateScheduled, info.ScheduledFor.UTC(), 0
	}
	writeRecord(c.stateWriter, &rec, true)
}

// installState gives w its state tracking extension. Its events cost a map
// lookup per task when no type is tracked; its start-up step creates the
// writer and the buckets only when one is.
func (w *Worker) installState() {
	w.addExtension(extension{Plugin: Plugin{
		Name:     "state",
		Prepare:  w.prepareState,
		Started:  w.stateStarted,
		Finished: w.stateFinished,
	}})
}

// prepareState creates the record writer and the buckets when at least
// one registered type is tracked.
func (w *Worker) prepareState(ctx context.Context, _ *Worker) error {
	tracked := false
	for _, tt := range w.order {
		tracked = tracked || w.typeTracked(tt)
	}
	if !tracked {
		return nil // Once creates the effects bucket when first used
	}
	if err := ensureBuckets(ctx, w.js, w.opts); err != nil {
		return err
	}
	sw, err := newStateWriter(w.nc, w.names, w.log)
	if err != nil {
		return err
	}
	w.stateWriter = sw
	return nil
}

// stateRecord starts the record of t in state st.
func (w *Worker) stateRecord(t *Task, st TaskState, now time.Time) *TaskRecord {
	rec := &TaskRecord{
		ID: t.ID, Type: t.Type, Priority: t.Priority, State: st,
		Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, Sequence: t.Sequence,
		EnqueuedAt: t.EnqueuedAt.UTC(), UpdatedAt: now,
		Schedule: t.Header(HeaderSchedule),
	}
	if !t.ScheduledFor.IsZero() {
		rec.ScheduledFor = t.ScheduledFor.UTC()
	}
	return rec
}

// stateTracked reports whether t's type has state tracking.
func (w *Worker) stateTracked(t *Task) bool {
	return w.stateWriter != nil && w.typeTracked(w.types[t.Type])
}

// typeTracked reports whether tasks of tt get state records.
func (w *Worker) typeTracked(tt *typeRunner) bool {
	if tt == nil {
		return false
	}
	switch tt.cfg.stateTracking {
	case 1:
		return true
	case -1:
		return false
	}
	return w.opts.stateEnabled
}

// taskState is the per-task state of state tracking: the result and the
// delayed "running" record.
type taskState = staterec.Attempt

func (w *Worker) stateStarted(_ context.Context, t *Task) {
	if !w.stateTracked(t) {
		return
	}
	start := time.Now().UTC()
	running := func() {
		rec := w.stateRecord(t, StateRunning, time.Now().UTC())
		rec.StartedAt = start
		writeRecord(w.stateWriter, rec, false)
	}
	if w.opts.stateRunningAfter == 0 {
		running()
		return
	}
	t.stateOf().Started(w.opts.stateRunningAfter, running)
}

// stateFinished writes the record of an attempt's outcome.
func (w *Worker) stateFinished(_ context.Context, t *Task, o Outcome) {
	if !w.stateTracked(t) {
		return
	}
	now := time.Now().UTC()
	var rec *TaskRecord
	switch o.Action {
	case ActionAck:
		rec = w.stateRecord(t, StateSucceeded, now)
		rec.StartedAt, rec.FinishedAt = now.Add(-o.Took), now
		if t.state != nil {
			rec.Result = t.state.Result
		}
	case ActionRetry:
		rec = w.stateRecord(t, StateRetrying, now)
		rec.Error, rec.NextAttemptAt = truncate(o.Err.Error(), maxRecordError), now.Add(o.Delay)
	case ActionFail:
		st := StateFailed
		if o.DeadLettered {
			st = StateDead
		}
		rec = w.stateRecord(t, st, now)
		rec.Error, rec.FinishedAt = truncate(o.Err.Error(), maxRecordError), now
	default:
		return
	}
	t.state.Finished() // after the "running" record, if one is being written
	writeRecord(w.stateWriter, rec, false)
}

// stateOf returns t's tracking state, creating it.
func (t *Task) stateOf() *taskState {
	if t.state == nil {
		t.state = &taskState{}
	}
	return t.state
}
