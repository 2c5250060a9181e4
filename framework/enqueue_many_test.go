package framework_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
)

// probePayload is a payload whose encoding (done by EnqueueMany just before
// it publishes the job) records how many earlier jobs were already settled.
type probePayload struct {
	index   int
	settled *atomic.Int64
	lag     *atomic.Int64 // the largest index - settled seen
}

func (p probePayload) MarshalJSON() ([]byte, error) {
	lag := int64(p.index) - p.settled.Load()
	for {
		old := p.lag.Load()
		if lag <= old || p.lag.CompareAndSwap(old, lag) {
			break
		}
	}
	return strconv.AppendInt(nil, int64(p.index), 10), nil
}

// TestEnqueueManySettlesAsItGoes checks that EnqueueMany settles
// acknowledgements while it is still publishing: when a job is encoded, all
// but about two windows of the jobs before it were acknowledged (the
// window in flight plus the settler's queue). Holding every future until the
// end (memory growing with the batch) shows up as a lag of the whole batch.
func TestEnqueueManySettlesAsItGoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const window, n = 8, 2000
	var settled, lag atomic.Int64
	cl, err := framework.NewClient(e.nc, framework.WithMaxPending(window), framework.WithStateTracking(false),
		framework.WithHooks(framework.Hooks{Enqueued: func(context.Context, framework.TaskInfo) { settled.Add(1) }}))
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]framework.TaskSpec, n)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: "many.settle", Payload: probePayload{index: i, settled: &settled, lag: &lag}}
	}
	infos, err := cl.EnqueueMany(t.Context(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, info := range infos {
		if info.Sequence == 0 || info.Stream == "" {
			t.Fatalf("item %d not stored: %+v", i, info)
		}
	}
	if got := settled.Load(); got != n {
		t.Fatalf("%d Enqueued hooks for %d jobs", got, n)
	}
	// In flight: at most window publishes, window queued for the settler,
	// one in the settler's hands and one blocked on the queue.
	if max := lag.Load(); max > 2*window+2 {
		t.Fatalf("a job was encoded while %d earlier jobs were unsettled, want at most %d", max, 2*window+2)
	}
}

// TestEnqueueSeqReportsAsItGoes checks EnqueueSeq: jobs generated on the
// fly are reported once each, in order, while later jobs are still being
// published (the same window bound as EnqueueMany, so nothing grows with
// the number of jobs), and a job that cannot be built is reported as
// failed without stopping the others.
func TestEnqueueSeqReportsAsItGoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const window, n, bad = 8, 2000, 777
	var settled, lag atomic.Int64
	cl, err := framework.NewClient(e.nc, framework.WithMaxPending(window), framework.WithStateTracking(false))
	if err != nil {
		t.Fatal(err)
	}
	jobs := func(yield func(framework.TaskSpec) bool) {
		for i := range n {
			typ := "many.seq"
			if i == bad {
				typ = "Not A Type"
			}
			if !yield(framework.TaskSpec{Type: typ, Payload: probePayload{index: i, settled: &settled, lag: &lag}}) {
				return
			}
		}
	}
	next := 0
	failed := cl.EnqueueSeq(t.Context(), jobs, func(i int, info framework.TaskInfo, err error) {
		if i != next {
			t.Errorf("job %d reported when %d was next", i, next)
		}
		next = i + 1
		settled.Store(int64(i + 1))
		switch {
		case i == bad && !errors.Is(err, framework.ErrInvalidTaskType):
			t.Errorf("job %d: %v, want ErrInvalidTaskType", i, err)
		case i != bad && (err != nil || info.Sequence == 0):
			t.Errorf("job %d: %+v, %v", i, info, err)
		}
	})
	if failed != 1 || next != n {
		t.Fatalf("EnqueueSeq: %d failed, %d reported; want 1 and %d", failed, next, n)
	}
	if got := e.taskStreamMsgs(t); got != n-1 {
		t.Fatalf("%d tasks stored, want %d", got, n-1)
	}
	if max := lag.Load(); max > 2*window+2 {
		t.Fatalf("a job was encoded while %d earlier jobs were unreported, want at most %d", max, 2*window+2)
	}
}
