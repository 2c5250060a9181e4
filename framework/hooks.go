package framework

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/internal/hookset"
)

// Hooks are optional callbacks for metrics, tracing and logging, given with
// [WithHooks] (several sets compose: each runs) or added by a package built
// on the worker ([Worker.AddHooks]). Any field may be nil. Callbacks run synchronously on the goroutine of the task or
// call they report: keep them fast and non-blocking. They must be safe for
// concurrent use. A callback that panics is recovered: the panic is logged
// (and counted in [Stats].HookPanics for a worker's hooks) and the task goes
// on as if the callback had returned.
type Hooks struct {
	// Enqueued is called after a task was stored (or found duplicate), with
	// the context of the enqueue call.
	Enqueued func(ctx context.Context, info TaskInfo)
	// Enqueuing observes each task a [Client] publishes, around its
	// publication, for tracing: it is called with the enqueue call's
	// context once the task message is built and before it is sent, may
	// add headers to it (a W3C traceparent, for example, which handlers
	// read back from [Task.Headers]; delayed tasks keep them when their
	// schedule fires), and returns a function called exactly once with the
	// result: the task as stored, or the error of [Client.Enqueue] /
	// [Client.EnqueueMany] for it. Tasks refused before a message is built
	// (invalid type, options or payload) are not traced. A nil done
	// function is allowed; the done functions run in the reverse order of
	// the hooks. Clients only.
	Enqueuing func(ctx context.Context, info TaskInfo, header EnqueueHeader) (done func(info TaskInfo, err error))
	// Started is called before each attempt's handler runs, with the
	// handler's context (it carries the task: [TaskFromContext]).
	Started func(ctx context.Context, t *Task)
	// Finished is called once the outcome of an attempt was settled with the
	// server: the task was acknowledged ([ActionAck]), handed back for a
	// retry ([ActionRetry]) or failed for good ([ActionFail]). ctx is the
	// handler's context. It is not called when the settlement itself could
	// not be sent (see AckFailed) nor for tasks handed back at shutdown.
	// An Ack is queued for one goroutine of the worker that writes the
	// acks of all executors; when the connection refuses a queued Ack (it
	// closed, or its reconnect buffer is full), Finished has run and
	// AckFailed follows.
	Finished func(ctx context.Context, t *Task, o Outcome)
	// AckFailed is called when an Ack, Nak, InProgress (heartbeat) or Term
	// could not be sent; op names the operation ("ack", "nak",
	// "in_progress", "term"). The task will be redelivered after its
	// AckWait. ctx is the handler's context, or a background context for
	// heartbeats and hand-backs.
	AckFailed func(ctx context.Context, t *Task, op string, err error)
	// Event is called with the events plugins publish through
	// [Worker.Emit]. Each plugin defines its own event types, documented in
	// its package (package breaker publishes a breaker.StateChange when a
	// dependency's circuit breaker changes state): switch on ev's type and
	// ignore the types you do not know. It runs on the goroutine of the
	// plugin's call, with its context.
	Event func(ctx context.Context, ev any)
	// PullLost is called when a worker gives up a pull request of the
	// consumer of (taskType, p) because the server stopped sending its
	// heartbeats for two seconds (its consumer leader died, the connection
	// was cut) or retired it for a leadership change; a new request
	// replaces it at once. Also counted in [Stats].PullsLost.
	PullLost func(ctx context.Context, taskType string, p Priority)
}

// Action is what the worker did with a task after an attempt.
type Action uint8

const (
	// ActionAck: the handler returned nil; the task was acknowledged and is
	// gone from the task stream.
	ActionAck Action = iota + 1
	// ActionRetry: the attempt failed; the task was handed back for
	// redelivery after [Outcome].Delay.
	ActionRetry
	// ActionFail: the task failed for good: a permanent error
	// ([Permanent]), an undecodable payload, or its last attempt failed. With
	// dead letters on ([WithDeadLetters]) it was written to the dead-letter
	// stream first ([Outcome].DeadLettered).
	ActionFail
)

// String returns "ack", "retry" or "fail".
func (a Action) String() string {
	switch a {
	case ActionAck:
		return "ack"
	case ActionRetry:
		return "retry"
	case ActionFail:
		return "fail"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Outcome is the result of one attempt: what the worker did and why.
type Outcome struct {
	// Action is what was done with the task.
	Action Action
	// Err is the attempt's error; nil for [ActionAck].
	Err error
	// Delay is the wait before the redelivery of [ActionRetry]: the
	// handler's [RetryAfter], or the type's backoff.
	Delay time.Duration
	// Took is how long the handler ran.
	Took time.Duration
	// Panicked is true when the handler panicked (Err wraps [ErrPanic]).
	Panicked bool
	// DeadLettered is true when the worker wrote the dead-letter record of
	// an [ActionFail] itself. It is false with dead letters off, when the
	// server's max-deliveries advisory leads the dead-letter router to the
	// task instead (a last attempt), or nobody does (a permanent error).
	DeadLettered bool
}

// workerHooks returns the worker events of h (internal/hookset).
func workerHooks(h Hooks) hookset.Hooks[*Task, Outcome] {
	return hookset.Hooks[*Task, Outcome]{Started: h.Started, Finished: h.Finished, AckFailed: h.AckFailed, Event: h.Event, PullLost: h.PullLost}
}

// emitEnqueued calls the client's Enqueued hooks, in the order they were
// given ([WithHooks]).
func (c *Client) emitEnqueued(ctx context.Context, info TaskInfo) {
	for i := range c.opts.hooks {
		if h := c.opts.hooks[i].Enqueued; h != nil {
			hookset.Call(c.opts.logger, nil, "Enqueued", func() { h(ctx, info) })
		}
	}
}
