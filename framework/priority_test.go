package framework_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// runPriorityBacklog runs a worker of concurrency 1 over a backlog of nLow
// low tasks, enqueues nCrit critical tasks once the first low task runs, and
// returns the order in which tasks started ("low-3", "crit-0", ...).
//
// Every handler returns only once the dispatcher has a real choice: a
// critical task waits for the slot whenever critical tasks remain, and so
// does a low one whenever low tasks remain. The order therefore reflects the
// dispatch policy alone, not the timing of fetches.
func runPriorityBacklog(t *testing.T, nLow, nCrit int, opts ...framework.WorkerOption) []string {
	t.Helper()
	const typ = "prio.work"
	e := newEnv(t)
	w := e.worker(t, append([]framework.WorkerOption{framework.WithConcurrency(1)}, opts...)...)

	var (
		mu       sync.Mutex
		order    []string
		lowLeft  atomic.Int64
		critLeft atomic.Int64
	)
	lowLeft.Store(int64(nLow))
	critLeft.Store(int64(nCrit))
	firstStarted := make(chan struct{})
	var firstOnce sync.Once
	var running atomic.Int32

	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		if n := running.Add(1); n != 1 {
			t.Errorf("%d tasks running at once with concurrency 1", n)
		}
		defer running.Add(-1)
		name := string(task.Payload)
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		switch task.Priority {
		case framework.PriorityLow:
			lowLeft.Add(-1)
		case framework.PriorityCritical:
			critLeft.Add(-1)
		}
		firstOnce.Do(func() { close(firstStarted) })
		ok := waitCond(ctx, waitLong, func() bool {
			return (critLeft.Load() == 0 || w.WaitingForTest(framework.PriorityCritical) > 0) &&
				(lowLeft.Load() == 0 || w.WaitingForTest(framework.PriorityLow) > 0)
		})
		if !ok {
			t.Errorf("%s: dispatcher never had both priorities waiting (crit left %d, low left %d)",
				name, critLeft.Load(), lowLeft.Load())
		}
		return nil
	})

	jobs := make([]framework.TaskSpec, nLow)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: typ, Payload: []byte(fmt.Sprintf("low-%d", i)),
			Options: []framework.EnqueueOption{framework.WithPriority(framework.PriorityLow)}}
	}
	if _, err := e.cl.EnqueueMany(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	startWorker(t, w)
	testutil.Recv(t, firstStarted, waitLong, "first low task started")
	for i := range nCrit {
		e.enqueue(t, typ, []byte(fmt.Sprintf("crit-%d", i)), framework.WithPriority(framework.PriorityCritical))
	}
	testutil.Wait(t, waitLong, "all tasks started", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(order) == nLow+nCrit
	})
	e.waitSettled(t, typ, framework.PriorityLow)
	e.waitSettled(t, typ, framework.PriorityCritical)
	mu.Lock()
	defer mu.Unlock()
	return slices.Clone(order)
}

func TestStrictPriorityUnderBacklog(t *testing.T) {
	t.Parallel()
	const nLow, nCrit = 20, 10
	order := runPriorityBacklog(t, nLow, nCrit)
	// The first low task was already running; every critical task must start
	// before any other low one, and each priority keeps its FIFO order.
	var want []string
	want = append(want, "low-0")
	for i := range nCrit {
		want = append(want, fmt.Sprintf("crit-%d", i))
	}
	for i := 1; i < nLow; i++ {
		want = append(want, fmt.Sprintf("low-%d", i))
	}
	if !slices.Equal(order, want) {
		t.Fatalf("start order:\n got  %v\n want %v", order, want)
	}
}

func TestWeightedPriorityLetsLowProgress(t *testing.T) {
	t.Parallel()
	// With equal weights each start picks low with probability 1/2 while
	// both wait, so 20 critical starts in a row happen once in a million.
	const nLow, nCrit = 20, 20
	order := runPriorityBacklog(t, nLow, nCrit, framework.WithWeights(1, 1, 1, 1))
	lastCrit := -1
	for i, name := range order {
		if strings.HasPrefix(name, "crit-") {
			lastCrit = i
		}
	}
	lowsBefore := 0
	for _, name := range order[1:lastCrit] {
		if strings.HasPrefix(name, "low-") {
			lowsBefore++
		}
	}
	if lowsBefore == 0 {
		t.Fatalf("weighted dispatch starved low tasks: order %v", order)
	}
	t.Logf("%d low tasks started while critical ones waited", lowsBefore)
}
