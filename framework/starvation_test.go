package framework_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// Under strict priority, low tasks fetched into the pull buffer wait behind
// critical work for three times the ack wait. They must not be redelivered:
// the worker takes them out of the buffer and keeps them alive with
// heartbeats, so each runs once, on its first attempt.
func TestStarvedBufferedTasksAreNotRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		lows      = 6
		criticals = 30
		ackWait   = time.Second
		work      = 100 * time.Millisecond // 30 × 100 ms = 3 ack waits of critical work
	)
	for i := range lows {
		e.enqueue(t, "starve.job", i, framework.WithPriority(framework.PriorityLow))
	}
	for i := range criticals {
		e.enqueue(t, "starve.job", 100+i, framework.WithPriority(framework.PriorityCritical))
	}

	var mu sync.Mutex
	attempts := map[int][]int{} // payload → attempts seen
	lowDone := make(chan struct{}, lows)
	w := e.worker(t, framework.WithConcurrency(1))
	framework.Handle(w, "starve.job", func(ctx context.Context, task *framework.Task, n int) error {
		mu.Lock()
		attempts[n] = append(attempts[n], task.Attempt)
		mu.Unlock()
		if task.Priority == framework.PriorityCritical {
			select {
			case <-time.After(work):
			case <-ctx.Done():
				return ctx.Err()
			}
			return nil
		}
		lowDone <- struct{}{}
		return nil
	}, framework.WithAckWait(ackWait), framework.WithPrefetch(4), framework.WithMaxAttempts(10))
	startWorker(t, w)

	for range lows {
		testutil.Recv(t, lowDone, 60*time.Second, "low task")
	}
	testutil.Wait(t, 30*time.Second, "every critical task ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == lows+criticals
	})
	mu.Lock()
	defer mu.Unlock()
	for n, as := range attempts {
		if len(as) != 1 || as[0] != 1 {
			t.Errorf("task %d ran with attempts %v, want exactly one first attempt", n, as)
		}
	}
	if ci := e.consumerInfo(t, "starve.job", framework.PriorityLow); ci.NumRedelivered != 0 {
		t.Errorf("low consumer redelivered %d tasks", ci.NumRedelivered)
	}
}

// Tasks queued in the pull buffer behind slow work of their own priority
// wait there, each for longer than the ack wait in all, while every task
// ahead of them gets its slot quickly (so none starves and nothing is
// rescued). The sweeper must beat the buffer itself: each task runs once,
// on its first attempt.
func TestBufferedTasksBehindSlowWorkAreNotRedelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		tasks   = 20
		ackWait = time.Second
		work    = 150 * time.Millisecond // 20 × 150 ms = 3 ack waits in the buffer for the last
	)
	for i := range tasks {
		e.enqueue(t, "buffered.job", i)
	}

	var mu sync.Mutex
	attempts := map[int][]int{} // payload → attempts seen
	w := e.worker(t, framework.WithConcurrency(1))
	framework.Handle(w, "buffered.job", func(ctx context.Context, task *framework.Task, n int) error {
		mu.Lock()
		attempts[n] = append(attempts[n], task.Attempt)
		mu.Unlock()
		select {
		case <-time.After(work):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, framework.WithAckWait(ackWait), framework.WithPrefetch(tasks), framework.WithMaxAttempts(10))
	startWorker(t, w)

	testutil.Wait(t, 60*time.Second, "every task ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(attempts) == tasks
	})
	ci := e.waitSettled(t, "buffered.job", framework.PriorityNormal)
	mu.Lock()
	defer mu.Unlock()
	for n, as := range attempts {
		if len(as) != 1 || as[0] != 1 {
			t.Errorf("task %d ran with attempts %v, want exactly one first attempt", n, as)
		}
	}
	if ci.NumRedelivered != 0 {
		t.Errorf("consumer redelivered %d tasks", ci.NumRedelivered)
	}
}
