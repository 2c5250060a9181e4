package framework

import "time"

// Hooks are optional callbacks for metrics and tracing. Any field may be nil.
// Callbacks run synchronously on the task's goroutine: keep them fast and
// non-blocking. They must be safe for concurrent use.
type Hooks struct {
	// Enqueued is called after a task was stored (or found duplicate).
	Enqueued func(info TaskInfo)
	// Started is called before the handler runs.
	Started func(t *Task)
	// Succeeded is called after the handler returned nil and the task was acked.
	Succeeded func(t *Task, took time.Duration)
	// Retried is called when a failed attempt is handed back for a retry
	// after delay.
	Retried func(t *Task, err error, delay time.Duration)
	// Failed is called when a task fails for good: a permanent error, an
	// undecodable payload, or its last attempt failed.
	Failed func(t *Task, err error)
	// AckFailed is called when an Ack, Nak, InProgress or Term could not be
	// sent; op names the operation. The task will be redelivered after its
	// AckWait.
	AckFailed func(t *Task, op string, err error)
	// BreakerStateChanged is called when the circuit breaker of dependency
	// dep changes state (see [Call]). It runs on the goroutine of the call
	// that caused the change, after the breaker's lock was released.
	BreakerStateChanged func(dep string, from, to BreakerState)
}
