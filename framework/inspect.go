package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Inspector reads task state, queue statistics and schedules, and cancels
// delayed tasks. It is safe for concurrent use.
type Inspector struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	opts  *options
	names streams.Names
}

// NewInspector returns an inspector on nc, configured by [WithPrefix],
// [WithLogger] and [WithCodec].
func NewInspector(nc *nats.Conn, opts ...InspectorOption) (*Inspector, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	o, err := newOptions(opts, InspectorOption.applyInspector)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(asyncAckTimeout))
	if err != nil {
		return nil, fmt.Errorf("framework: jetstream: %w", err)
	}
	return &Inspector{nc: nc, js: js, opts: o, names: o.names}, nil
}

// Inspector returns an inspector sharing the client's connection and
// options.
func (c *Client) Inspector() *Inspector {
	return &Inspector{nc: c.nc, js: c.js, opts: c.opts, names: c.names}
}

// GetTask returns the state record of task id. Without a record (state
// tracking off, or the record expired) a delayed task still waiting in its
// schedule is reported as [StateScheduled]. Otherwise it returns an error
// wrapping [ErrNotFound].
func (i *Inspector) GetTask(ctx context.Context, id string) (*TaskRecord, error) {
	if id == "" {
		return nil, fmt.Errorf("%w: empty task ID", ErrNotFound)
	}
	kv, err := i.js.KeyValue(ctx, i.names.StateBucket())
	switch {
	case errors.Is(err, jetstream.ErrBucketNotFound):
	case err != nil:
		return nil, fmt.Errorf("framework: get task %s: %w", id, err)
	default:
		e, err := kv.Get(ctx, stateKey(id))
		switch {
		case err == nil:
			var rec TaskRecord
			if err := json.Unmarshal(e.Value(), &rec); err != nil {
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
	var rec *TaskRecord
	read := func(m jsapi.Stored) error {
		p := topology.ParsePending(i.names, m.Header)
		rec = &TaskRecord{ID: id, Type: p.Type, Priority: p.Priority, State: StateScheduled, Sequence: m.Seq,
			EnqueuedAt: m.Time, ScheduledFor: p.Due, UpdatedAt: m.Time}
		return nil
	}
	if _, err := i.readPending(ctx, id, read); err != nil {
		return nil, fmt.Errorf("framework: get task %s: %w", id, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("%w: task %s", ErrNotFound, id)
	}
	return rec, nil
}

// readPending calls fn with the pending delayed task id, in the delay or
// the schedule stream (delays.Topology.Read).
func (i *Inspector) readPending(ctx context.Context, id string, fn func(jsapi.Stored) error) (bool, error) {
	return topology.DelayTopology(i.names).Read(ctx, i.nc, id, fn)
}

// CancelTask cancels a delayed task that is still waiting in its schedule:
// the schedule is purged, so the task never runs, and its state record (if
// it has one: state tracking was on) becomes [StateCancelled]. When the task has no
// pending schedule it returns an error matching [ErrNotFound], which also
// matches [ErrNotCancellable] when a state record says what became of the
// task (it fired, or was enqueued without delay). [Client.Cancel] is the
// same call. A closed connection returns [ErrNotConnected], a missing task
// stream [ErrTopologyMissing]. A schedule that fires in the same instant as the purge
// may still run the task; its state record then shows it running.
func (i *Inspector) CancelTask(ctx context.Context, id string) error {
	if err := streams.ValidateID(id); err != nil {
		return err
	}
	// Read the schedule first, for the cancelled record: in the schedule
	// stream, or still in the delay stream on its way there.
	rec := TaskRecord{ID: id}
	awaited := false // enqueued with Awaited: Wait needs the cancelled record
	read := func(m jsapi.Stored) error {
		p := topology.ParsePending(i.names, m.Header)
		awaited = m.Header.Get(HeaderAwaited) != ""
		rec.Priority, rec.Type, rec.ScheduledFor, rec.EnqueuedAt = p.Priority, p.Type, p.Due, p.EnqueuedAt
		return nil
	}
	_, err := i.readPending(ctx, id, read)
	if err == nil {
		// Each purge reports how many messages it removed, so a schedule
		// that fires meanwhile is reported as not found.
		var removed uint64
		removed, err = topology.DelayTopology(i.names).Cancel(ctx, i.nc, id)
		if err == nil && removed == 0 {
			rec, gerr := i.GetTask(ctx, id)
			if gerr != nil {
				return fmt.Errorf("%w: task %s has no pending schedule", ErrNotFound, id)
			}
			return fmt.Errorf("%w (%w): task %s is %s", ErrNotCancellable, ErrNotFound, id, rec.State)
		}
	}
	if err != nil {
		if i.nc.IsClosed() {
			err = fmt.Errorf("%w: %w", nats.ErrConnectionClosed, err)
		}
		return natserr.Wrap("framework: cancel task "+id, err)
	}
	// Record the cancellation when the task has a state record (state
	// tracking was on when it was enqueued).
	kv, err := i.js.KeyValue(ctx, i.names.StateBucket())
	if err != nil {
		return nil
	}
	if _, err := kv.Get(ctx, stateKey(id)); err != nil && !awaited {
		return nil
	}
	now := time.Now().UTC()
	rec.State, rec.UpdatedAt, rec.FinishedAt = StateCancelled, now, now
	if _, err := kv.Put(ctx, stateKey(id), rec.appendJSON(nil)); err != nil {
		return fmt.Errorf("framework: cancel task %s: schedule removed, but the state record could not be written: %w", id, err)
	}
	return nil
}
