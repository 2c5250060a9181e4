package framework

import (
	"context"
	"errors"
	"testing"
	"time"
)

// The handler context is built lazily (handlerctx.go); these check that it
// answers what context.WithTimeoutCause would, whichever way it is asked.

func TestHandlerCtxTimedOutWithoutLooking(t *testing.T) {
	task := &Task{ID: "t1"}
	// A deadline that has passed by the time anyone asks: a handler that
	// never looked at its context still timed out.
	c := newHandlerCtx(context.Background(), task, time.Now(), time.Nanosecond)
	defer c.end()
	if !c.timedOut() {
		t.Fatal("timedOut = false after the deadline, want true")
	}
	if c.real != nil {
		t.Fatal("timedOut created the real context")
	}
	if got := TaskFromContext(c); got != task {
		t.Fatalf("TaskFromContext = %v, want the task", got)
	}
	if c.real != nil {
		t.Fatal("asking for the task created the real context")
	}
}

func TestHandlerCtxDoneAndCause(t *testing.T) {
	c := newHandlerCtx(context.Background(), &Task{}, time.Now(), time.Nanosecond)
	defer c.end()
	<-c.Done() // past deadline: closed at once
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, want DeadlineExceeded", c.Err())
	}
	if cause := context.Cause(c); !errors.Is(cause, ErrHandlerTimeout) {
		t.Fatalf("Cause = %v, want ErrHandlerTimeout", cause)
	}
	if !c.timedOut() {
		t.Fatal("timedOut = false, want true")
	}
	// A context derived from it is cancelled with it.
	child, cancel := context.WithCancel(c)
	defer cancel()
	<-child.Done()
}

func TestHandlerCtxNotTimedOut(t *testing.T) {
	c := newHandlerCtx(context.Background(), &Task{}, time.Now(), time.Hour)
	if c.timedOut() {
		t.Fatal("timedOut = true an hour before the deadline")
	}
	d, ok := c.Deadline()
	if !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("Deadline = %v, %v; want about an hour from now", d, ok)
	}
	if c.Err() != nil {
		t.Fatalf("Err = %v before the end", c.Err())
	}
	c.end()
	<-c.Done()
	if !errors.Is(c.Err(), context.Canceled) || c.timedOut() {
		t.Fatalf("after end: Err = %v, timedOut = %v; want Canceled, false", c.Err(), c.timedOut())
	}
}

func TestHandlerCtxEndedBeforeFirstUse(t *testing.T) {
	// A goroutine of the handler that asks only after the attempt ended
	// finds the context cancelled.
	c := newHandlerCtx(context.Background(), &Task{}, time.Now(), 0)
	if _, ok := c.Deadline(); ok {
		t.Fatal("Deadline set without a timeout")
	}
	c.end()
	select {
	case <-c.Done():
	default:
		t.Fatal("Done not closed after end")
	}
}

func TestHandlerCtxParentCancelled(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	c := newHandlerCtx(parent, &Task{}, time.Now(), time.Hour)
	defer c.end()
	errStop := errors.New("stopping")
	cancel(errStop)
	<-c.Done()
	if cause := context.Cause(c); cause != errStop {
		t.Fatalf("Cause = %v, want the parent's", cause)
	}
	if c.timedOut() {
		t.Fatal("timedOut = true for a cancelled parent")
	}
}
