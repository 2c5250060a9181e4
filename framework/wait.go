package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/streams"
)

// Awaited marks the task so that the worker running it writes its final
// state record (succeeded, failed, dead) even where state tracking is off
// for its type, and nothing else: no "pending" or "running" record. That
// record is what [Client.Wait] waits for. Tasks of tracked types and tasks
// whose handler calls [SetResult] or [ReportProgress] get it anyway.
func Awaited() EnqueueOption {
	return func(c *enqueueConfig) error {
		c.SetHeader(HeaderAwaited, "1")
		return nil
	}
}

// TaskFailedError is what [Client.Wait] returns for a task that ended
// without succeeding. It matches [ErrTaskFailed], or [ErrTaskCancelled]
// for a cancelled task.
type TaskFailedError struct {
	// ID is the task's ID; State is StateFailed, StateDead or
	// StateCancelled; Attempt the last attempt.
	ID      string
	State   TaskState
	Attempt int
	// LastError is the error text of the last attempt (at most 1 KiB).
	LastError string
}

// Error says how the task ended, with its last error.
func (e *TaskFailedError) Error() string {
	switch e.State {
	case StateCancelled:
		return fmt.Sprintf("framework: task %s was cancelled before it ran", e.ID)
	case StateDead:
		return fmt.Sprintf("framework: task %s failed after %d attempt(s) and was dead-lettered: %s", e.ID, e.Attempt, e.LastError)
	}
	return fmt.Sprintf("framework: task %s failed after %d attempt(s): %s", e.ID, e.Attempt, e.LastError)
}

// Unwrap returns [ErrTaskCancelled] for a cancelled task, else
// [ErrTaskFailed].
func (e *TaskFailedError) Unwrap() error {
	if e.State == StateCancelled {
		return ErrTaskCancelled
	}
	return ErrTaskFailed
}

// Wait blocks until task id reaches a final state and returns its record.
// It watches the task's key in the state bucket, so it sees a task that
// finished before the call (while its record is kept: [WithStateTTL]) as
// well as one that finishes later, without polling; give ctx a deadline.
// When the client's connection reconnects (a server restarted), it starts
// a new watch, which begins with the key's current value.
//
// A task that succeeded returns its record and nil; [TaskRecord.DecodeResult]
// (or [WaitResult]) reads its result. A task that failed for good, was
// dead-lettered or was cancelled returns its record and a
// [*TaskFailedError] (matching [ErrTaskFailed] or [ErrTaskCancelled]) with
// its last error.
//
// Wait needs the task's final record: enqueue it with [Awaited], or track
// its type's state ([WithTypeStateTracking]), or have its handler call
// [SetResult]. A task without one is never seen to end. When ctx ends
// first, Wait returns an error wrapping ctx's error: with the last record
// seen when there is one (the task is still pending, running or retrying),
// and also matching [ErrNotFound] when no record of the task appeared at
// all (an unknown ID, a task not started yet, or one that writes no
// record). Records say what happened, they are not a commit log: a task
// whose worker died on its last attempt is dead-lettered by the router and
// keeps its last record; a record written while the state bucket's stream
// was unavailable is lost, except the final record of a task that is
// awaited or asked for records, which is tried again up to 20 times
// (see docs/state.md).
//
// It creates the state bucket if it does not exist yet (see
// [EnsureBuckets]). It is safe for concurrent use.
func (c *Client) Wait(ctx context.Context, id string) (*TaskRecord, error) {
	if err := streams.ValidateID(id); err != nil {
		return nil, fmt.Errorf("framework: wait for task %q: %w", id, err)
	}
	kv, err := c.stateBucket(ctx)
	if err != nil {
		return nil, fmt.Errorf("framework: wait for task %s: %w", id, err)
	}
	// A reconnection (a server restarted, or another one of the cluster)
	// starts a new watch at once (see staterec.Wait).
	reconnected := c.nc.StatusChanged(nats.CONNECTED)
	defer c.nc.RemoveStatusListener(reconnected)
	var last *TaskRecord
	err = staterec.Wait(ctx, kv, stateKey(id), reconnected, func(data []byte, revision uint64) (final, ok bool) {
		var rec TaskRecord
		if err := json.Unmarshal(data, &rec); err != nil || rec.ID != id || !knownState(rec.State) {
			return false, false
		}
		rec.Revision = revision
		last = &rec
		return rec.State.Final(), true
	})
	var start *staterec.StartError
	var bad *staterec.BadRecordError
	switch {
	case err == nil:
	case errors.As(err, &start):
		return nil, fmt.Errorf("framework: wait for task %s: %w", id, c.waitErr(ctx, start.Err))
	case errors.As(err, &bad):
		return nil, fmt.Errorf("framework: wait for task %s: %s", id, bad)
	case errors.Is(err, staterec.ErrWatchEnded):
		return last, fmt.Errorf("framework: wait for task %s: the watch ended: %w", id, c.waitErr(ctx, ErrNotConnected))
	case last == nil: // ctx ended
		return nil, fmt.Errorf("framework: wait for task %s: %w: no state record of it appeared (an unknown ID, a task not started yet, or one that writes no record: enqueue it with Awaited): %w",
			id, ErrNotFound, err)
	default:
		return last, fmt.Errorf("framework: wait for task %s: still %s (attempt %d): %w", id, last.State, last.Attempt, err)
	}
	if last.State == StateSucceeded {
		return last, nil
	}
	return last, &TaskFailedError{ID: id, State: last.State, Attempt: last.Attempt, LastError: last.Error}
}

// WaitResult waits for task id like [Client.Wait] and decodes its result
// (the value its handler gave [SetResult]) into a T. It returns Wait's
// errors, and one matching [ErrNotFound] when the task succeeded without a
// result.
func WaitResult[T any](ctx context.Context, c *Client, id string) (T, error) {
	var v T
	rec, err := c.Wait(ctx, id)
	if err != nil {
		return v, err
	}
	if err := rec.DecodeResult(&v); err != nil {
		return v, fmt.Errorf("framework: result of task %s: %w", id, err)
	}
	return v, nil
}

// knownState reports whether s is one of the states a record can hold.
func knownState(s TaskState) bool { return staterec.Known(string(s)) }

// stateBucket returns the state bucket, creating it (with the default
// retention, the task stream's storage and replicas) when it does not
// exist yet: Wait may start before any worker did.
func (c *Client) stateBucket(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := c.js.KeyValue(ctx, c.names.StateBucket())
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return kv, c.waitErr(ctx, err)
	}
	if err := ensureBuckets(ctx, c.js, c.opts); err != nil {
		return nil, fmt.Errorf("state bucket %s does not exist and could not be created: %w", c.names.StateBucket(), c.waitErr(ctx, err))
	}
	kv, err = c.js.KeyValue(ctx, c.names.StateBucket())
	return kv, c.waitErr(ctx, err)
}

// waitErr adds ErrNotConnected to err when the client's connection is
// closed, and says what a request of the state bucket's stream that got no
// answer may mean: a user not allowed to watch it gets none (the server
// refuses the request without answering it).
func (c *Client) waitErr(_ context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case c.nc.IsClosed() && !errors.Is(err, ErrNotConnected):
		return fmt.Errorf("%w: %w", ErrNotConnected, err)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || natserr.NoResponse(err):
		stream := "KV_" + c.names.StateBucket()
		hint := ""
		if le := c.nc.LastError(); errors.Is(le, nats.ErrPermissionViolation) && strings.Contains(le.Error(), stream) {
			hint = " (" + le.Error() + ")"
		}
		return fmt.Errorf("%w: the state bucket's stream did not answer%s; waiting needs its user to be allowed $JS.API.STREAM.INFO.%s, $JS.API.CONSUMER.CREATE.%s.> and $JS.FC.%s.>",
			err, hint, stream, stream, stream)
	}
	return err
}
