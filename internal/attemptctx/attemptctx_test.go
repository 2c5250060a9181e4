package attemptctx

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The attempt's context is built lazily; these check that it answers what
// context.WithTimeoutCause would, whichever way it is asked.

type taskKey struct{}

type task struct{ ID string }

var errTimeout = errors.New("handler timed out")

func newHandlerCtx(parent context.Context, t *task, start time.Time, timeout time.Duration) *Attempt {
	return New(parent, taskKey{}, t, start, timeout, errTimeout)
}

func TestAttemptTimedOutWithoutLooking(t *testing.T) {
	tk := &task{ID: "t1"}
	// A deadline that has passed by the time anyone asks: a handler that
	// never looked at its context still timed out.
	c := newHandlerCtx(context.Background(), tk, time.Now(), time.Nanosecond)
	defer c.End()
	if !c.TimedOut() {
		t.Fatal("timedOut = false after the deadline, want true")
	}
	if c.real != nil {
		t.Fatal("timedOut created the real context")
	}
	if got, _ := c.Value(taskKey{}).(*task); got != tk {
		t.Fatalf("TaskFromContext = %v, want the task", got)
	}
	if c.real != nil {
		t.Fatal("asking for the task created the real context")
	}
}

func TestAttemptDoneAndCause(t *testing.T) {
	c := newHandlerCtx(context.Background(), &task{}, time.Now(), time.Nanosecond)
	defer c.End()
	<-c.Done() // past deadline: closed at once
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", c.Err())
	}
	if cause := context.Cause(c); !errors.Is(cause, errTimeout) {
		t.Fatalf("Cause = %v, want errTimeout", cause)
	}
	if !c.TimedOut() {
		t.Fatal("timedOut = false, want true")
	}
	// A context derived from it is cancelled with it.
	child, cancel := context.WithCancel(c)
	defer cancel()
	<-child.Done()
}

func TestAttemptNotTimedOut(t *testing.T) {
	c := newHandlerCtx(context.Background(), &task{}, time.Now(), time.Hour)
	if c.TimedOut() {
		t.Fatal("timedOut = true an hour before the deadline")
	}
	d, ok := c.Deadline()
	if !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("Deadline = %v, %v; want about an hour from now", d, ok)
	}
	if c.Err() != nil {
		t.Fatalf("Err = %v before the end", c.Err())
	}
	c.End()
	<-c.Done()
	if !errors.Is(c.Err(), context.Canceled) || c.TimedOut() {
		t.Fatalf("after end: Err = %v, timedOut = %v; want Canceled, false", c.Err(), c.TimedOut())
	}
}

func TestAttemptEndedBeforeFirstUse(t *testing.T) {
	// A goroutine of the handler that asks only after the attempt ended
	// finds the context cancelled.
	c := newHandlerCtx(context.Background(), &task{}, time.Now(), 0)
	if _, ok := c.Deadline(); ok {
		t.Fatal("Deadline set without a timeout")
	}
	c.End()
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after end")
	}
}

func TestAttemptParentCancelled(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	c := newHandlerCtx(parent, &task{}, time.Now(), time.Hour)
	defer c.End()
	errStop := errors.New("stopping")
	cancel(errStop)
	<-c.Done()
	if cause := context.Cause(c); cause != errStop {
		t.Fatalf("Cause = %v, want the parent's", cause)
	}
	if c.TimedOut() {
		t.Fatal("timedOut = true for a cancelled parent")
	}
}
