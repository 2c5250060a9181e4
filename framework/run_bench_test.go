package framework_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// BenchmarkRunHooked runs b.N tasks, enqueued before the timer starts, on a
// worker with a plugin and two hook sets observing each attempt, of a type
// that declares the payload versions it accepts: each task walks the event
// fan-out (internal/hookset) and the version gate (internal/versiongate).
// Allocations per task (allocs/op) are the figure to watch; they include
// the embedded server's and the worker's start, so compare runs with the
// same -benchtime (for example 20000x).
func BenchmarkRunHooked(b *testing.B) {
	te := testutil.NewEnv(b, streams.Config{})
	cl, err := framework.NewClient(te.Conn)
	if err != nil {
		b.Fatal(err)
	}
	for left := b.N; left > 0; left -= 1000 {
		jobs := make([]framework.TaskSpec, min(left, 1000))
		for i := range jobs {
			jobs[i] = framework.TaskSpec{Type: "bench", Payload: benchPayload}
		}
		if _, err := cl.EnqueueMany(b.Context(), jobs); err != nil {
			b.Fatal(err)
		}
	}
	var finished atomic.Int64
	all := make(chan struct{})
	started := func(context.Context, *framework.Task) {}
	noop := func(context.Context, *framework.Task, framework.Outcome) {}
	last := func(context.Context, *framework.Task, framework.Outcome) {
		if finished.Add(1) == int64(b.N) {
			close(all)
		}
	}
	w, err := framework.NewWorker(testutil.Connect(b, te.Server), framework.WithHooks(framework.Hooks{Started: started, Finished: last}))
	if err != nil {
		b.Fatal(err)
	}
	w.AddHooks(framework.Hooks{Started: started, Finished: noop})
	w.Use(framework.Plugin{Name: "bench", Started: started, Finished: noop})
	w.HandleFunc("bench", func(context.Context, *framework.Task) error { return nil }, framework.AcceptVersions(1, 2))
	b.ReportAllocs()
	b.ResetTimer()
	testutil.StartWorker(b, w)
	select {
	case <-all:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%d of %d tasks finished", finished.Load(), b.N)
	}
	b.StopTimer()
}
