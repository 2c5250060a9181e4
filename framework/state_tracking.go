package framework

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/staterec"
)

// How clients and workers write task state records (internal/staterec):
// the client after each enqueue, the worker through its extension events
// (started, finished).

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
	c.stateWriter.Enqueued(staterec.Record{ID: info.ID, Type: info.Type, Priority: recordPriority(info.Priority),
		Sequence: info.Sequence, ScheduledFor: info.ScheduledFor})
}

// installState gives w its state tracking extension. Its events cost a nil
// check per task when no type is tracked; its start-up step creates the
// tracker and the buckets only when one is.
func (w *Worker) installState() {
	w.addExtension(extension{Plugin: Plugin{
		Name:     "state",
		Prepare:  w.prepareState,
		Started:  w.stateStarted,
		Finished: w.stateFinished,
	}})
}

// prepareState creates the tracker, and the buckets when at least one
// registered type is tracked. Without a tracked type the tracker writes
// only for the tasks that ask (progress, a result, [Awaited]), and the
// first of them creates the buckets.
func (w *Worker) prepareState(ctx context.Context, _ *Worker) error {
	types := make([]staterec.TypeSetting, len(w.order))
	for i, tt := range w.order {
		types[i] = staterec.TypeSetting{Name: tt.name, Tracking: tt.cfg.stateTracking}
	}
	tr, err := staterec.Prepare(ctx, types, w.opts.stateEnabled, w.opts.stateRunningAfter,
		func(ctx context.Context) error { return ensureBuckets(ctx, w.js, w.opts) },
		func() (*staterec.Writer, error) { return newStateWriter(w.nc, w.names, w.log) })
	if err != nil {
		return err
	}
	w.tracker = tr
	return nil
}

// tracker returns the tracker of the worker running t, nil for a task
// built outside a worker.
func (t *Task) tracker() *staterec.Tracker {
	if t.worker == nil {
		return nil
	}
	return t.worker.tracker
}

// recordsAsked makes sure the state bucket exists before a task of an
// untracked type writes records it asked for (progress, a result).
func (t *Task) recordsAsked(ctx context.Context, tr *staterec.Tracker) error {
	if err := tr.Asked(ctx, record(t)); err != nil {
		return fmt.Errorf("framework: %w", err)
	}
	return nil
}

// record starts the record of t's attempt.
func record(t *Task) staterec.Record {
	rec := staterec.Record{ID: t.ID, Type: t.Type, Priority: recordPriority(t.Priority),
		Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, Sequence: t.Sequence,
		EnqueuedAt: t.EnqueuedAt.UTC(), Schedule: t.Header(HeaderSchedule)}
	if !t.ScheduledFor.IsZero() {
		rec.ScheduledFor = t.ScheduledFor.UTC()
	}
	return rec
}

// recordPriority is p's name in a record ("normal" for an invalid p).
func recordPriority(p Priority) string {
	if p.Valid() {
		return p.String()
	}
	return PriorityNormal.String()
}

// stateStarted starts the records of a tracked task's attempt. A task of
// an untracked type enqueued with [Awaited] gets only its final record: the
// state bucket must exist for it (staterec.Tracker.Begin).
func (w *Worker) stateStarted(ctx context.Context, t *Task) {
	if w.tracker == nil {
		return
	}
	if err := w.tracker.Begin(ctx, record(t), t.Header(HeaderAwaited) != "", t.stateOf); err != nil {
		w.log.Warn("jetflow cannot store the final record of an awaited task", slog.Any(LogKeyError, err))
	}
}

// endStates are the record states of an attempt's [Action]; a task
// failed for good is "dead" when it was dead-lettered.
var endStates = [...]string{ActionAck: staterec.Succeeded, ActionRetry: staterec.Retrying, ActionFail: staterec.Failed}

// stateFinished writes the record of an attempt's outcome, when
// staterec.Tracker.End says it gets one. The final record of an awaited
// task, or of an untracked one, is confirmed by the server.
func (w *Worker) stateFinished(_ context.Context, t *Task, o Outcome) {
	if w.tracker == nil || int(o.Action) >= len(endStates) || endStates[o.Action] == "" {
		return
	}
	out := staterec.Outcome{State: endStates[o.Action], Took: o.Took, Delay: o.Delay}
	if o.Action == ActionFail && o.DeadLettered {
		out.State = staterec.Dead
	}
	w.tracker.End(record(t), t.Header(HeaderAwaited) != "", t.state, out, o.Err)
}

// stateOf returns t's tracking state, creating it.
func (t *Task) stateOf() *staterec.Attempt {
	if t.state == nil {
		t.state = &staterec.Attempt{}
	}
	return t.state
}

// stateRouted writes the "dead" record of a task this worker's router or
// reconciler dead-lettered (staterec.Tracker.Routed).
func (w *Worker) stateRouted(rt deadletter.RoutedTask) {
	rec := staterec.Record{ID: rt.TaskID, Type: rt.Type, Priority: rt.Priority, Attempt: rt.Deliveries,
		MaxAttempts: rt.Deliveries, Sequence: rt.Seq}
	w.tracker.Routed(rec, rt.Header.Get(HeaderAwaited) != "", rt.Error)
}
