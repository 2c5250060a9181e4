package framework

import (
	"context"
	"sync"
	"time"
)

// The context of one handler attempt, with the type's timeout as its
// deadline, built only as far as the handler uses it.
//
// context.WithTimeoutCause arms a runtime timer and registers the child with
// the worker's context for every attempt; for short tasks that was a tenth
// of the worker's own CPU (docs/benchmarks.md). A handler that never looks
// at its context's Done channel, Err or a value other than its task does
// not need either: handlerCtx answers Deadline and the task from its own
// fields and creates the real context (with the same parent, deadline and
// cause) the first time anything else is asked. So a handler, a hook or a
// derived context sees exactly what WithTimeoutCause would give it, and an
// attempt that outlives its deadline without asking is still reported as
// timed out ([handlerCtx.timedOut]).

// handlerCtx is the context of one attempt. parent carries the task.
type handlerCtx struct {
	parent   context.Context
	task     *Task
	deadline time.Time // zero: no timeout

	mu     sync.Mutex
	real   context.Context // nil until first needed
	cancel context.CancelFunc
	ended  bool // the attempt is over: the context is cancelled
}

// newHandlerCtx returns the context of an attempt of t under parent that
// started at start, timing out after timeout (none when 0). end ends it.
func newHandlerCtx(parent context.Context, t *Task, start time.Time, timeout time.Duration) *handlerCtx {
	c := new(handlerCtx)
	c.init(parent, t, start, timeout)
	return c
}

// init makes c, which must be unused, newHandlerCtx's context.
func (c *handlerCtx) init(parent context.Context, t *Task, start time.Time, timeout time.Duration) {
	c.parent, c.task = parent, t
	if timeout > 0 {
		c.deadline = start.Add(timeout)
	}
}

// taskCtx is the worker's context carrying a task under execution, what
// context.WithValue(ctx, taskKey{}, t) gives, without an allocation of its
// own (it lives in the pending task).
type taskCtx struct {
	context.Context
	task *Task
}

// Value answers the task and asks the parent for anything else.
func (c *taskCtx) Value(key any) any {
	if _, ok := key.(taskKey); ok {
		return c.task
	}
	return c.Context.Value(key)
}

// materialize returns the real context, creating it on first use.
func (c *handlerCtx) materialize() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real == nil {
		if c.deadline.IsZero() {
			c.real, c.cancel = context.WithCancel(c.parent)
		} else {
			c.real, c.cancel = context.WithDeadlineCause(c.parent, c.deadline, ErrHandlerTimeout)
		}
		if c.ended {
			c.cancel()
		}
	}
	return c.real
}

// end cancels the context: the attempt is over.
func (c *handlerCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.cancel != nil {
		c.cancel()
	}
}

// timedOut reports whether the attempt ran into its deadline: the real
// context was cancelled with cause ErrHandlerTimeout, or, when nothing
// created it, the deadline has passed.
func (c *handlerCtx) timedOut() bool {
	c.mu.Lock()
	real := c.real
	c.mu.Unlock()
	if real != nil {
		return context.Cause(real) == ErrHandlerTimeout
	}
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline) && c.parent.Err() == nil
}

// Deadline returns the attempt's deadline, or the parent's when earlier.
func (c *handlerCtx) Deadline() (time.Time, bool) {
	pd, ok := c.parent.Deadline()
	if c.deadline.IsZero() || (ok && pd.Before(c.deadline)) {
		return pd, ok
	}
	return c.deadline, true
}

// Done returns the real context's Done channel.
func (c *handlerCtx) Done() <-chan struct{} { return c.materialize().Done() }

// Err returns the real context's Err.
func (c *handlerCtx) Err() error { return c.materialize().Err() }

// Value answers the task itself and asks the real context for anything
// else (context.Cause finds its cancellation there).
func (c *handlerCtx) Value(key any) any {
	if _, ok := key.(taskKey); ok {
		return c.task
	}
	return c.materialize().Value(key)
}
