package framework_test

import (
	"context"
	"runtime"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestEnqueueKeepsTheStackSmall: a goroutine started for one Enqueue (an
// HTTP handler's, a producer's per request) waits for the acknowledgement
// with the stack it started with, grown once to 4 KiB, not twice that:
// thousands of enqueues waiting for their acknowledgements hold those
// stacks, and 8 KiB each tipped a loaded producer into a pile-up where
// 4 KiB did not (decision 045). The enqueues here wait on a subscriber
// that never answers. Not parallel: it reads the process's stack memory.
// .ci/run runs it without the race detector too.
func TestEnqueueKeepsTheStackSmall(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector widens every frame; run without -race")
	}
	s := testutil.RunServer(t)
	nc := testutil.Connect(t, s)
	// No stream under this prefix: a subscriber takes the tasks and never
	// acknowledges them.
	const n = 200
	var mu sync.Mutex
	got, allIn := 0, make(chan struct{})
	sub, err := testutil.Connect(t, s).Subscribe("held.>", func(*nats.Msg) {
		mu.Lock()
		defer mu.Unlock()
		if got++; got == n {
			close(allIn)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	cl, err := framework.NewClient(nc, framework.WithPrefix("held"), framework.WithPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	payload := []byte(`{"n":1}`)
	var wg sync.WaitGroup
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		wg.Go(func() { _, _ = cl.Enqueue(ctx, "stack.small", payload) })
	}
	<-allIn
	runtime.ReadMemStats(&after)
	cancel()
	wg.Wait()
	per := (int64(after.StackInuse) - int64(before.StackInuse)) / n
	t.Logf("%d bytes of stack per enqueue waiting for its acknowledgement", per)
	// 4 KiB, with room for the few that grow in the allocator's slow path.
	if limit := int64(6 << 10); per > limit {
		t.Errorf("%d bytes of stack per goroutine waiting in Enqueue, want at most %d", per, limit)
	}
}
