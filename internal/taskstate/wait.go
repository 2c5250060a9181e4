package taskstate

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/streams"
)

// Wait blocks until task id has a final record and returns it, whatever
// its state (framework tells success from failure). It watches the task's
// key in the state bucket, creating the bucket first when it does not
// exist, and starts a new watch on each reconnection of the connection
// (see staterec.Wait). A value under the key that is not a record of the
// task, or holds an unknown state, ends the wait with an error.
//
// When ctx ends first, it returns an error wrapping ctx's error: with the
// last record seen when there is one, and matching [ErrNotFound] when
// none appeared. A watch that ends (its connection closed) returns the
// last record seen, if any, and an error matching natserr.ErrNotConnected.
// An error starting the watch says what may have caused it.
func (ts *Tasks) Wait(ctx context.Context, id string) (*staterec.Record, error) {
	if err := streams.ValidateID(id); err != nil {
		return nil, fmt.Errorf("framework: wait for task %q: %w", id, err)
	}
	kv, err := ts.stateBucket(ctx)
	if err != nil {
		return nil, fmt.Errorf("framework: wait for task %s: %w", id, err)
	}
	// A reconnection (a server restarted, or another one of the cluster)
	// starts a new watch at once (see staterec.Wait).
	reconnected := ts.nc.StatusChanged(nats.CONNECTED)
	defer ts.nc.RemoveStatusListener(reconnected)
	var last *staterec.Record
	err = staterec.Wait(ctx, kv, staterec.Key(id), reconnected, func(data []byte, revision uint64) (final, ok bool) {
		rec, err := staterec.Decode(data)
		if err != nil || rec.ID != id || !staterec.Known(rec.State) {
			return false, false
		}
		rec.Revision = revision
		last = &rec
		return staterec.Final(rec.State), true
	})
	var start *staterec.StartError
	var bad *staterec.BadRecordError
	switch {
	case err == nil:
		return last, nil
	case errors.As(err, &start):
		return nil, fmt.Errorf("framework: wait for task %s: %w", id, ts.waitErr(start.Err))
	case errors.As(err, &bad):
		return nil, fmt.Errorf("framework: wait for task %s: %s", id, bad)
	case errors.Is(err, staterec.ErrWatchEnded):
		return last, fmt.Errorf("framework: wait for task %s: the watch ended: %w", id, ts.waitErr(natserr.ErrNotConnected))
	case last == nil: // ctx ended
		return nil, fmt.Errorf("framework: wait for task %s: %w: no state record of it appeared (an unknown ID, a task not started yet, or one that writes no record: enqueue it with Awaited): %w",
			id, ErrNotFound, err)
	}
	return last, fmt.Errorf("framework: wait for task %s: still %s (attempt %d): %w", id, last.State, last.Attempt, err)
}

// stateBucket returns the state bucket, creating it with ts.ensure when it
// does not exist yet.
func (ts *Tasks) stateBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := ts.js.KeyValue(ctx, ts.names.StateBucket())
	if !errors.Is(err, jetstream.ErrBucketNotFound) || ts.ensure == nil {
		return kv, ts.waitErr(err)
	}
	if err := ts.ensure(ctx); err != nil {
		return nil, fmt.Errorf("state bucket %s does not exist and could not be created: %w", ts.names.StateBucket(), ts.waitErr(err))
	}
	kv, err = ts.js.KeyValue(ctx, ts.names.StateBucket())
	return kv, ts.waitErr(err)
}

// waitErr adds natserr.ErrNotConnected to err when the connection is
// closed, and says what a request of the state bucket's stream that got
// no answer may mean: a user not allowed to watch it gets none (the server
// refuses the request without answering it).
func (ts *Tasks) waitErr(err error) error {
	switch {
	case err == nil:
		return nil
	case ts.nc.IsClosed() && !errors.Is(err, natserr.ErrNotConnected):
		return fmt.Errorf("%w: %w", natserr.ErrNotConnected, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || natserr.NoResponse(err):
		stream := "KV_" + ts.names.StateBucket()
		hint := ""
		if le := ts.nc.LastError(); errors.Is(le, nats.ErrPermissionViolation) && strings.Contains(le.Error(), stream) {
			hint = " (" + le.Error() + ")"
		}
		return fmt.Errorf("%w: the state bucket's stream did not answer%s; waiting needs its user to be allowed $JS.API.STREAM.INFO.%s, $JS.API.CONSUMER.CREATE.%s.> and $JS.FC.%s.>",
			err, hint, stream, stream, stream)
	}
	return err
}
