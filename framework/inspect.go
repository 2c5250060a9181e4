package framework

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskstate"
)

// Inspector reads task state, queue statistics and schedules, and cancels
// delayed tasks. It is safe for concurrent use.
type Inspector struct {
	tasks *taskstate.Tasks
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
	return &Inspector{tasks: taskstate.New(nc, js, o.names, nil)}, nil
}

// Inspector returns an inspector sharing the client's connection and
// options.
func (c *Client) Inspector() *Inspector {
	return &Inspector{tasks: taskstate.New(c.nc, c.js, c.names, nil)}
}

// GetTask returns the state record of task id. Without a record (state
// tracking off, or the record expired) a delayed task still waiting in its
// schedule is reported as [StateScheduled]. Otherwise it returns an error
// wrapping [ErrNotFound].
func (i *Inspector) GetTask(ctx context.Context, id string) (*TaskRecord, error) {
	rec, err := i.tasks.Get(ctx, id)
	return taskRecord(rec), err
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
	return i.tasks.Cancel(ctx, id)
}
