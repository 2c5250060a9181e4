package taskstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

var (
	// ErrNotFound reports that a task or schedule does not exist (any
	// more). It is framework.ErrNotFound.
	ErrNotFound = errors.New("framework: not found")
	// ErrNotCancellable reports a task that [Tasks.Cancel] cannot cancel:
	// it no longer waits in a schedule. It is framework.ErrNotCancellable.
	ErrNotCancellable = errors.New("framework: task cannot be cancelled")
)

// Tasks reads, awaits and cancels the tasks of one deployment. It is safe
// for concurrent use.
type Tasks struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  streams.Names
	ensure func(context.Context) error
}

// New returns the tasks of the deployment names, reached with nc and js.
// ensure creates the state bucket when [Tasks.Wait] finds none (a wait may
// start before any worker did); nil leaves a missing bucket an error.
func New(nc *nats.Conn, js jetstream.JetStream, names streams.Names, ensure func(context.Context) error) *Tasks {
	return &Tasks{nc: nc, js: js, names: names, ensure: ensure}
}

// Get returns the state record of task id, with its revision. Without one
// (no state bucket, no record, or a deleted one), a delayed task still
// waiting in its schedule is reported as a "scheduled" record made from
// the schedule (revision 0). Otherwise it returns an error matching
// [ErrNotFound]; a record that does not decode is an error that says so.
func (ts *Tasks) Get(ctx context.Context, id string) (*staterec.Record, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty task ID", ErrNotFound)
	}
	kv, err := ts.js.KeyValue(ctx, ts.names.StateBucket())
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
	case err != nil:
		return nil, fmt.Errorf("framework: get task %s: %w", id, err)
	default:
		e, err := kv.Get(ctx, staterec.Key(id))
		switch {
		case err == nil:
			rec, err := staterec.Decode(e.Value())
			if err != nil {
				return nil, fmt.Errorf("framework: get task %s: bad record: %w", id, err)
			}
			rec.Revision = e.Revision()
			return &rec, nil
		case !errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted):
			return nil, fmt.Errorf("framework: get task %s: %w", id, err)
		}
	}
	// No record: look for a pending schedule.
	if streams.ValidateID(id) != nil {
		return nil, fmt.Errorf("%w: task %s", ErrNotFound, id)
	}
	var rec *staterec.Record
	read := func(m jsapi.Stored) error {
		p := topology.ParsePending(ts.names, m.Header)
		rec = &staterec.Record{ID: id, Type: p.Type, Priority: priorityName(p.Priority), State: staterec.Scheduled,
			Sequence: m.Seq, EnqueuedAt: m.Time, ScheduledFor: p.Due, UpdatedAt: m.Time}
		return nil
	}
	if _, err := topology.DelayTopology(ts.names).Read(ctx, ts.nc, id, read); err != nil {
		return nil, fmt.Errorf("framework: get task %s: %w", id, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: task %s", ErrNotFound, id)
	}
	return rec, nil
}

// Cancel cancels the delayed task id while it waits in its schedule: the
// schedule is purged, so the task never runs, and its state record, when
// it has one or was enqueued to be awaited ([staterec.HeaderAwaited]),
// becomes "cancelled". Without a pending schedule it returns an error
// matching [ErrNotFound], which also matches [ErrNotCancellable] when a
// state record says what became of the task. An invalid ID returns
// streams.ValidateID's error; the server's errors are classified by
// natserr.Wrap (a closed connection matches natserr.ErrNotConnected).
func (ts *Tasks) Cancel(ctx context.Context, id string) error {
	if err := streams.ValidateID(id); err != nil {
		return err
	}
	// Read the schedule first, for the cancelled record: in the schedule
	// stream, or still in the delay stream on its way there.
	rec := staterec.Record{ID: id, Priority: streams.PriorityNormal.String()}
	awaited := false // Wait needs the cancelled record
	read := func(m jsapi.Stored) error {
		p := topology.ParsePending(ts.names, m.Header)
		awaited = m.Header.Get(staterec.HeaderAwaited) != ""
		rec.Priority, rec.Type, rec.ScheduledFor, rec.EnqueuedAt = priorityName(p.Priority), p.Type, p.Due, p.EnqueuedAt
		return nil
	}
	delays := topology.DelayTopology(ts.names)
	_, err := delays.Read(ctx, ts.nc, id, read)
	if err == nil {
		// Each purge reports how many messages it removed, so a schedule
		// that fires meanwhile is reported as not found.
		var removed uint64
		removed, err = delays.Cancel(ctx, ts.nc, id)
		if err == nil && removed == 0 {
			got, gerr := ts.Get(ctx, id)
			if gerr != nil {
				return fmt.Errorf("%w: task %s has no pending schedule", ErrNotFound, id)
			}
			return fmt.Errorf("%w (%w): task %s is %s", ErrNotCancellable, ErrNotFound, id, got.State)
		}
	}
	if err != nil {
		if ts.nc.IsClosed() {
			err = fmt.Errorf("%w: %w", nats.ErrConnectionClosed, err)
		}
		return natserr.Wrap("framework: cancel task "+id, err)
	}
	// Record the cancellation when the task has a state record (state
	// tracking was on when it was enqueued) or is awaited.
	kv, err := ts.js.KeyValue(ctx, ts.names.StateBucket())
	if err != nil {
		return nil
	}
	if _, err := kv.Get(ctx, staterec.Key(id)); err != nil && !awaited {
		return nil
	}
	now := time.Now().UTC()
	rec.State, rec.UpdatedAt, rec.FinishedAt = staterec.Cancelled, now, now
	if _, err := kv.Put(ctx, staterec.Key(id), rec.AppendJSON(nil)); err != nil {
		return fmt.Errorf("framework: cancel task %s: schedule removed, but the state record could not be written: %w", id, err)
	}
	return nil
}

// priorityName is p's name in a record ("normal" for an invalid p).
func priorityName(p streams.Priority) string {
	if p.Valid() {
		return p.String()
	}
	return streams.PriorityNormal.String()
}
