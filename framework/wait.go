package framework

import (
	"context"
	"fmt"

	"github.com/jetflow-io/jetflow/internal/taskstate"
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
	ensure := func(ctx context.Context) error { return ensureBuckets(ctx, c.js, c.opts) }
	got, err := taskstate.New(c.nc, c.js, c.names, ensure).Wait(ctx, id)
	rec := taskRecord(got)
	if err != nil || rec.State == StateSucceeded {
		return rec, err
	}
	return rec, &TaskFailedError{ID: id, State: rec.State, Attempt: rec.Attempt, LastError: rec.Error}
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
