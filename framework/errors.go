package framework

import (
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/internal/enqueue"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/taskstate"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

// Errors returned by the calls of this package (and of the packages built
// on it). Match them with [errors.Is]: the errors returned wrap them with
// the details.
var (
	// ErrInvalidOption wraps every error returned for an invalid option value.
	ErrInvalidOption = errors.New("framework: invalid option")
	// ErrInvalidTaskType reports a task type that is not a dotted name of
	// [a-z0-9_-] tokens. It is the same value as [streams.ErrInvalidTaskType].
	ErrInvalidTaskType = streams.ErrInvalidTaskType
	// ErrInvalidID reports a caller-supplied task ID that is not a valid
	// subject token. It is the same value as [streams.ErrInvalidID].
	ErrInvalidID = streams.ErrInvalidID
	// ErrInvalidDependency reports a dependency name that is not 1 to 128
	// bytes of A-Z a-z 0-9 _ - and inner dots.
	ErrInvalidDependency = topology.ErrInvalidDependency
	// ErrPayloadTooLarge reports a task whose encoded size exceeds the
	// server's max payload.
	ErrPayloadTooLarge = natserr.ErrPayloadTooLarge
	// ErrEncode reports a payload the codec could not encode.
	ErrEncode = enqueue.ErrEncode
	// ErrOrdering reports an ordered enqueue that cannot keep its promise:
	// an ordered task with a priority or a delay.
	ErrOrdering = enqueue.ErrOrdering
	// ErrUniqueBucket reports that the unique bucket could not be created or
	// reached; nothing was enqueued.
	ErrUniqueBucket = unique.ErrBucket
	// ErrTopologyMissing reports that the task stream does not exist or does
	// not accept the subject: call [streams.Ensure] first.
	ErrTopologyMissing = natserr.ErrTopologyMissing
	// ErrQueueFull reports that the task stream is at its size limit
	// (streams.Config.MaxTaskBytes) and refused the task: nothing was
	// stored and no waiting task was discarded. The stream's own error is
	// wrapped too. Enqueue does not retry it; retry later, when workers
	// have made room (decision 040).
	ErrQueueFull = natserr.ErrQueueFull
	// ErrNotConnected reports that the connection to NATS is closed or
	// unavailable. Nothing was enqueued; retry when the server is back.
	ErrNotConnected = natserr.ErrNotConnected
	// ErrNotFound reports that a task or schedule does not exist (any more).
	ErrNotFound = taskstate.ErrNotFound
	// ErrNotCancellable reports a task that [Inspector.CancelTask] cannot
	// cancel: it is no longer waiting in a schedule (it is queued, running
	// or done). Such an error matches [ErrNotFound] too: the schedule is not
	// found.
	ErrNotCancellable = taskstate.ErrNotCancellable
	// ErrTaskFailed is returned by [Client.Wait] for a task that failed for
	// good: a permanent error, or its last attempt failed
	// ([TaskFailedError]).
	ErrTaskFailed = errors.New("framework: task failed")
	// ErrTaskCancelled is returned by [Client.Wait] for a delayed task
	// cancelled before it ran.
	ErrTaskCancelled = errors.New("framework: task cancelled")
	// ErrWorkerClosed is returned by [Worker.Run] when the worker was already
	// run or shut down.
	ErrWorkerClosed = errors.New("framework: worker closed")
	// ErrNoHandlers is returned by [Worker.Run] when no handler is registered.
	ErrNoHandlers = errors.New("framework: no handlers registered")
	// ErrPullStalled is returned by [Worker.Run] when a fetch loop heard
	// nothing from its consumer (no task, no empty poll) for the stall limit
	// ([Timings].StallLimit) while it was not waiting for a free slot: the
	// worker consumes nothing and a restart is the cure.
	ErrPullStalled = errors.New("framework: pull stalled")
	// ErrNoTask reports a call that needs a task's context ([SetResult],
	// [ReportProgress], the effects ledger's Once) made outside a handler.
	ErrNoTask = errors.New("framework: not called from a task handler")
	// ErrResultTooLarge reports a [SetResult] value above [MaxResultBytes].
	ErrResultTooLarge = errors.New("framework: task result too large")
	// ErrInvalidProgress reports a [ReportProgress] call with negative
	// counts, Done above a known Total, or a message that is too long, not
	// UTF-8, or holds control characters.
	ErrInvalidProgress = errors.New("framework: invalid task progress")
)

// Errors a task fails with: the error of an attempt ([Outcome].Err) or of
// a dead-letter record wraps them. Match them with [errors.Is].
var (
	// ErrDecode reports a payload a typed handler could not decode. Such a task
	// is poison: it is never retried.
	ErrDecode = errors.New("framework: cannot decode payload")
	// ErrCorruptTask reports a task message whose jetflow headers cannot be
	// trusted, for example a Jetflow-Scheduled-For that is not a time. Such
	// a task fails permanently (it is dead-lettered, never retried), with
	// the reason in the error.
	ErrCorruptTask = errors.New("framework: corrupt task message")
	// ErrHandlerTimeout is the cause of a handler context cancelled because
	// the task's timeout passed.
	ErrHandlerTimeout = errors.New("framework: handler timed out")
	// ErrPanic wraps a panic recovered from a handler.
	ErrPanic = errors.New("framework: handler panicked")
	// ErrBlockedSkipped is the error of a blocked task an operator skipped
	// with [github.com/jetflow-io/jetflow/inspect.Operator.ResolveBlocked]:
	// the task is dead-lettered with it and its key moves on.
	ErrBlockedSkipped = errors.New("framework: blocked ordered task skipped by an operator")
	// ErrVersion is wrapped by the error of a task dead-lettered because no
	// live worker accepts its payload version (dead-letter reason
	// "version").
	ErrVersion = errors.New("framework: no live worker accepts the payload version")
)

// PermanentError marks a failure that retrying cannot fix. The task is not
// retried; it is terminated (and dead-lettered) with Err as the reason.
type PermanentError struct {
	// Err is the failure's cause.
	Err error
}

// Error returns "permanent: " and the cause's message.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that the task fails without further attempts.
// Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err or any error it wraps is a *[PermanentError].
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p)
}

// RetryAfterError asks for the next attempt after Delay instead of the
// handler's backoff. It still spends one attempt.
type RetryAfterError struct {
	// Delay is the time to wait before the next attempt.
	Delay time.Duration
	Err   error // optional cause
}

// Error describes the requested delay and the cause, if any.
func (e *RetryAfterError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry after %v", e.Delay)
	}
	return fmt.Sprintf("retry after %v: %v", e.Delay, e.Err)
}

// Unwrap returns the cause, if any.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns an error that retries the task after d (rather than after
// the backoff delay).
func RetryAfter(d time.Duration) error { return &RetryAfterError{Delay: d} }

// RetryAfterErr is [RetryAfter] with a cause that is logged and reported.
func RetryAfterErr(d time.Duration, err error) error { return &RetryAfterError{Delay: d, Err: err} }

// DecodeError reports a payload that could not be decoded into the handler's
// type. It wraps [ErrDecode] and the codec's error.
type DecodeError struct {
	// TaskType is the type of the task whose payload did not decode.
	TaskType string
	// Encoding is the payload's encoding, for example "json".
	Encoding string
	// Err is the codec's error.
	Err error
}

// Error describes the task type, encoding and codec error.
func (e *DecodeError) Error() string {
	return fmt.Sprintf("framework: cannot decode %s payload of task type %s: %v", e.Encoding, e.TaskType, e.Err)
}

// Unwrap returns [ErrDecode] and the codec's error.
func (e *DecodeError) Unwrap() []error { return []error{ErrDecode, e.Err} }

// BatchError reports the items of [Client.EnqueueMany] that failed, by index.
// The other items were enqueued.
type BatchError struct {
	// Errors maps the index of each failed job to its error.
	Errors map[int]error
}

// Error counts the failures and describes the first one.
func (e *BatchError) Error() string {
	first := -1
	for i := range e.Errors {
		if first < 0 || i < first {
			first = i
		}
	}
	return fmt.Sprintf("framework: %d of the batch's tasks were not enqueued; first failure, item %d: %v", len(e.Errors), first, e.Errors[first])
}

// Unwrap returns the individual errors.
func (e *BatchError) Unwrap() []error {
	errs := make([]error, 0, len(e.Errors))
	for _, err := range e.Errors {
		errs = append(errs, err)
	}
	return errs
}
