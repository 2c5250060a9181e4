package framework_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
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

// TestEnqueueManyLostAcknowledgements loses the acknowledgements of a window
// of publishes on the way (the server stores the jobs, the client hears
// nothing), then breaks the connection. EnqueueMany publishes each of those
// jobs again with its task ID once its wait for the acknowledgement ends;
// the stream drops the copies as duplicates, and every job is reported
// stored, exactly once.
func TestEnqueueManyLostAcknowledgements(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testutil.WithListen())
	proxy := testutil.NewProxy(t, e.srv.Addr().String())
	nc, err := nats.Connect(proxy.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	const window, n, muteAt = 16, 400, 100
	var settled atomic.Int64
	muted := make(chan struct{})
	cl, err := framework.NewClient(nc, framework.WithMaxPending(window), framework.WithStateTracking(false),
		framework.WithHooks(framework.Hooks{Enqueued: func(context.Context, framework.TaskInfo) {
			if settled.Add(1) == muteAt {
				proxy.Mute()
				close(muted)
			}
		}}))
	if err != nil {
		t.Fatal(err)
	}
	cl.SetAckTimeoutForTest(300 * time.Millisecond)
	jobs := make([]framework.TaskSpec, n)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: "many.lost", Payload: i}
	}
	type result struct {
		infos []framework.TaskInfo
		err   error
	}
	done := make(chan result, 1)
	go func() {
		infos, err := cl.EnqueueMany(t.Context(), jobs)
		done <- result{infos, err}
	}()
	<-muted
	// The window fills up with jobs that are stored but unacknowledged.
	testutil.Wait(t, 30*time.Second, "the unacknowledged jobs to be stored", func() bool { return e.taskStreamMsgs(t) >= muteAt+window })
	proxy.Cut()
	proxy.Restore()
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	seqs := make(map[uint64]bool, n)
	dups := 0
	for i, info := range res.infos {
		if info.Sequence == 0 || seqs[info.Sequence] {
			t.Fatalf("job %d: %+v (sequence missing or reported twice)", i, info)
		}
		seqs[info.Sequence] = true
		if info.Duplicate {
			dups++
		}
	}
	if got := e.taskStreamMsgs(t); got != n {
		t.Fatalf("%d tasks stored, want %d", got, n)
	}
	if dups == 0 {
		t.Fatal("no job was published again: no acknowledgement was lost")
	}
	t.Logf("%d jobs published again after their acknowledgement was lost", dups)
}
