package jetflowtest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/settle"
	"github.com/jetflow-io/jetflow/internal/taskctx"
)

// TaskOption configures a task built by [NewTask].
type TaskOption func(*taskConfig)

type taskConfig struct {
	task  *framework.Task
	codec framework.Codec
}

// ID sets the task ID. Default "task-1".
func ID(id string) TaskOption { return func(c *taskConfig) { c.task.ID = id } }

// Attempt sets the delivery count of this attempt, from 1. Default 1.
func Attempt(n int) TaskOption { return func(c *taskConfig) { c.task.Attempt = n } }

// MaxAttempts sets the type's attempt limit. Default
// [framework.DefaultMaxAttempts].
func MaxAttempts(n int) TaskOption { return func(c *taskConfig) { c.task.MaxAttempts = n } }

// Priority sets the task's priority. Default [framework.PriorityNormal].
func Priority(p framework.Priority) TaskOption { return func(c *taskConfig) { c.task.Priority = p } }

// Header adds a header to the task message.
func Header(key, value string) TaskOption {
	return func(c *taskConfig) { c.task.Headers.Add(key, value) }
}

// DueAt makes the task a delayed one, due at t: it sets
// [framework.Task].ScheduledFor and its header, as a delayed task carries
// them. The harness runs the handler at once.
func DueAt(t time.Time) TaskOption {
	return func(c *taskConfig) {
		c.task.ScheduledFor = t
		c.task.Headers.Set(framework.HeaderScheduledFor, t.UTC().Format(time.RFC3339Nano))
	}
}

// EnqueuedAt sets when the task was enqueued. Default: now.
func EnqueuedAt(t time.Time) TaskOption { return func(c *taskConfig) { c.task.EnqueuedAt = t } }

// Codec encodes the payload with c instead of JSON, as a client configured
// with [framework.WithCodec] does.
func Codec(codec framework.Codec) TaskOption { return func(c *taskConfig) { c.codec = codec } }

// NewTask builds a task of taskType carrying payload encoded as a client
// encodes it: JSON by default (see [Codec]), a []byte as is. It panics when
// the payload cannot be encoded: a test's programming error.
func NewTask(taskType string, payload any, opts ...TaskOption) *framework.Task {
	t := &framework.Task{
		ID: "task-1", Type: taskType, Attempt: 1, MaxAttempts: framework.DefaultMaxAttempts,
		EnqueuedAt: time.Now(), Headers: nats.Header{}, Sequence: 1,
	}
	c := taskConfig{task: t, codec: framework.JSONCodec()}
	for _, o := range opts {
		o(&c)
	}
	switch p := payload.(type) {
	case nil:
	case []byte:
		t.Payload = p
		t.Headers.Set(framework.HeaderEncoding, "raw")
	default:
		data, err := c.codec.Marshal(payload)
		if err != nil {
			panic(fmt.Sprintf("jetflowtest: encode %T: %v", payload, err))
		}
		t.Payload = data
		if n := c.codec.Name(); n != "json" {
			t.Headers.Set(framework.HeaderEncoding, n)
		}
	}
	t.Headers.Set(jetstream.MsgIDHeader, t.ID)
	return t
}

// RunOption sets the policy a run is judged by.
type RunOption func(*runConfig)

type runConfig struct {
	backoff     framework.BackoffPolicy
	deadLetters bool
	timeout     time.Duration
	codec       framework.Codec
}

// WithBackoff sets the type's retry delays, as [framework.WithBackoff]
// does. Default: the zero [framework.BackoffPolicy].
func WithBackoff(p framework.BackoffPolicy) RunOption { return func(c *runConfig) { c.backoff = p } }

// WithDeadLetters says whether the worker writes dead letters, as
// [framework.WithDeadLetters]. Default on.
func WithDeadLetters(on bool) RunOption { return func(c *runConfig) { c.deadLetters = on } }

// WithTimeout bounds the attempt like [framework.WithTimeout]: the
// handler's context is cancelled with cause [framework.ErrHandlerTimeout]
// after d. Default: none.
func WithTimeout(d time.Duration) RunOption { return func(c *runConfig) { c.timeout = d } }

// WithCodec sets the codec [RunTyped] decodes with, as a worker's
// [framework.WithCodec]. Default JSON.
func WithCodec(c framework.Codec) RunOption { return func(rc *runConfig) { rc.codec = c } }

// Run runs h once on t, as a worker runs an attempt (the task in the
// context, a panic recovered), and returns the outcome the worker would
// act on. The returned Outcome's DeadLettered says whether the worker would
// write the dead-letter record itself.
func Run(ctx context.Context, h framework.Handler, t *framework.Task, opts ...RunOption) framework.Outcome {
	c := runConfig{deadLetters: true}
	for _, o := range opts {
		o(&c)
	}
	return run(ctx, h, t, c)
}

// RunTyped runs a typed handler, as registered with [framework.Handle]:
// the payload is decoded into a T first, and a payload that cannot be
// decoded fails the task for good.
func RunTyped[T any](ctx context.Context, fn func(ctx context.Context, t *framework.Task, payload T) error,
	t *framework.Task, opts ...RunOption) framework.Outcome {
	c := runConfig{deadLetters: true}
	for _, o := range opts {
		o(&c)
	}
	return run(ctx, framework.TypedHandler(c.codec, fn), t, c)
}

func run(ctx context.Context, h framework.Handler, t *framework.Task, c runConfig) framework.Outcome {
	ctx = taskctx.With(ctx, t) // as a worker does: framework.TaskFromContext finds it
	var cancel context.CancelFunc
	if c.timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(ctx, c.timeout, framework.ErrHandlerTimeout)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	start := time.Now()
	err := call(ctx, h, t)
	took := time.Since(start)
	if err != nil && errors.Is(context.Cause(ctx), framework.ErrHandlerTimeout) && !errors.Is(err, framework.ErrHandlerTimeout) {
		err = fmt.Errorf("%w after %v: %w", framework.ErrHandlerTimeout, c.timeout, err)
	}
	r := settle.Result{Failed: err != nil, Permanent: framework.IsPermanent(err), Attempt: t.Attempt}
	var ra *framework.RetryAfterError
	if errors.As(err, &ra) {
		r.RetryAfter, r.HasRetryAfter = ra.Delay, true
	}
	d := settle.Decide(r, settle.Policy{MaxAttempts: t.MaxAttempts, Backoff: c.backoff.Delay, DeadLetters: c.deadLetters})
	o := framework.Outcome{Err: err, Took: took, Delay: d.Delay, Panicked: errors.Is(err, framework.ErrPanic)}
	switch d.Action {
	case settle.Ack:
		o.Action = framework.ActionAck
	case settle.Retry:
		o.Action = framework.ActionRetry
	case settle.Fail:
		o.Action, o.DeadLettered = framework.ActionFail, d.DeadLetter
	}
	return o
}

// call runs h, turning a panic into an error wrapping [framework.ErrPanic],
// as a worker does.
func call(ctx context.Context, h framework.Handler, t *framework.Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", framework.ErrPanic, r)
		}
	}()
	return h.Handle(ctx, t)
}
