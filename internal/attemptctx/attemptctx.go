package attemptctx

import (
	"context"
	"sync"
	"time"
)

// WithValue is a context carrying one value under one key, what
// context.WithValue gives, without an allocation of its own when it is
// embedded in a longer-lived struct. Key must be comparable.
type WithValue struct {
	context.Context
	Key, Val any
}

// Value answers Val for Key and asks the parent for anything else.
func (c *WithValue) Value(key any) any {
	if key == c.Key {
		return c.Val
	}
	return c.Context.Value(key)
}

// Attempt is the context of one attempt. Its zero value is unused; Init
// makes it ready and End ends it.
type Attempt struct {
	parent   context.Context
	key, val any
	cause    error     // the cause of the deadline
	deadline time.Time // zero: no timeout

	mu     sync.Mutex
	real   context.Context // nil until first needed
	cancel context.CancelFunc
	ended  bool // the attempt is over: the context is cancelled
}

// New returns a ready Attempt (see Init).
func New(parent context.Context, key, val any, start time.Time, timeout time.Duration, cause error) *Attempt {
	c := new(Attempt)
	c.Init(parent, key, val, start, timeout, cause)
	return c
}

// Init makes c, which must be unused, the context of an attempt under
// parent that started at start and times out with cause after timeout
// (none when 0), answering val for key.
func (c *Attempt) Init(parent context.Context, key, val any, start time.Time, timeout time.Duration, cause error) {
	c.parent, c.key, c.val, c.cause = parent, key, val, cause
	if timeout > 0 {
		c.deadline = start.Add(timeout)
	}
}

// materialize returns the real context, creating it on first use.
func (c *Attempt) materialize() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.real == nil {
		if c.deadline.IsZero() {
			c.real, c.cancel = context.WithCancel(c.parent)
		} else {
			c.real, c.cancel = context.WithDeadlineCause(c.parent, c.deadline, c.cause)
		}
		if c.ended {
			c.cancel()
		}
	}
	return c.real
}

// End cancels the context: the attempt is over.
func (c *Attempt) End() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.cancel != nil {
		c.cancel()
	}
}

// TimedOut reports whether the attempt ran into its deadline: the real
// context was cancelled with the deadline's cause, or, when nothing created
// it, the deadline has passed.
func (c *Attempt) TimedOut() bool {
	c.mu.Lock()
	real := c.real
	c.mu.Unlock()
	if real != nil {
		return context.Cause(real) == c.cause
	}
	return !c.deadline.IsZero() && !time.Now().Before(c.deadline) && c.parent.Err() == nil
}

// Deadline returns the attempt's deadline, or the parent's when earlier.
func (c *Attempt) Deadline() (time.Time, bool) {
	pd, ok := c.parent.Deadline()
	if c.deadline.IsZero() || (ok && pd.Before(c.deadline)) {
		return pd, ok
	}
	return c.deadline, true
}

// Done returns the real context's Done channel.
func (c *Attempt) Done() <-chan struct{} { return c.materialize().Done() }

// Err returns the real context's Err.
func (c *Attempt) Err() error { return c.materialize().Err() }

// Value answers the carried value itself and asks the real context for
// anything else (context.Cause finds its cancellation there).
func (c *Attempt) Value(key any) any {
	if key == c.key {
		return c.val
	}
	return c.materialize().Value(key)
}
