package framework_test

import (
	"runtime"
	"testing"
)

// TestEnqueueKeepsTheStackSmall: a goroutine started for one Enqueue (an
// HTTP handler's, a producer's per request) ends it with the stack it
// first grew to, not twice that: thousands of enqueues waiting for their
// acknowledgements hold those stacks, and 8 KiB each tipped a loaded
// producer into a pile-up where 4 KiB did not (decision 045). Not
// parallel: it reads the process's stack memory. .ci/run runs it without
// the race detector too.
func TestEnqueueKeepsTheStackSmall(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector widens every frame; run without -race")
	}
	e := newEnv(t)
	payload := []byte(`{"n":1}`)
	e.enqueue(t, "stack.small", payload) // the layout read and the subject, once
	const n = 200
	ready, release := make(chan error, n), make(chan struct{})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n {
		go func() {
			_, err := e.cl.Enqueue(t.Context(), "stack.small", payload)
			ready <- err
			<-release
		}()
	}
	for range n {
		if err := <-ready; err != nil {
			t.Error(err)
		}
	}
	runtime.ReadMemStats(&after)
	close(release)
	per := (int64(after.StackInuse) - int64(before.StackInuse)) / n
	t.Logf("%d bytes of stack per enqueue goroutine", per)
	// 4 KiB, with room for the few that grow in the allocator's slow path.
	if limit := int64(6 << 10); per > limit {
		t.Errorf("%d bytes of stack per goroutine after an Enqueue, want at most %d", per, limit)
	}
}
