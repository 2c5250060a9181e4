package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

type row struct {
	N    int  `json:"n"`
	Fail bool `json:"fail,omitempty"` // fail its first attempt
	Bad  bool `json:"bad,omitempty"`  // fail for good
}

// batches records the batches a handler received.
type batches struct {
	mu    sync.Mutex
	sizes []int
	runs  map[int][]int // row → attempts that ran
	done  chan int
}

func newBatches() *batches { return &batches{runs: map[int][]int{}, done: make(chan int, 256)} }

func (b *batches) handler(ctx context.Context, items []framework.BatchItem[row]) error {
	b.mu.Lock()
	b.sizes = append(b.sizes, len(items))
	b.mu.Unlock()
	for i := range items {
		it := &items[i]
		b.mu.Lock()
		b.runs[it.Payload.N] = append(b.runs[it.Payload.N], it.Task.Attempt)
		b.mu.Unlock()
		switch {
		case it.Payload.Bad:
			it.Err = framework.Permanent(fmt.Errorf("row %d is malformed", it.Payload.N))
		case it.Payload.Fail && it.Task.Attempt == 1:
			it.Err = errors.New("sink refused the row once")
		default:
			b.done <- it.Payload.N
		}
	}
	return nil
}

// Thirty tasks run in three calls of ten (the batches fill: the wait is
// long); a row that fails its first attempt is retried alone and succeeds
// on its second, the others of its batch succeed on their first; a row
// that fails for good is dead-lettered alone, reason permanent.
func TestBatchHandlerSettlesEachTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBatches()
	w := e.worker(t, framework.WithConcurrency(16))
	framework.HandleBatch(w, "rows.write", framework.Batch{Size: 10, MaxWait: time.Minute}, b.handler,
		framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}))
	var specs []framework.TaskSpec
	for i := range 30 {
		specs = append(specs, framework.TaskSpec{Type: "rows.write", Payload: row{N: i, Fail: i == 7, Bad: i == 12}})
	}
	if _, err := e.cl.EnqueueMany(t.Context(), specs); err != nil {
		t.Fatal(err)
	}
	startWorker(t, w)
	// 28 rows succeed first time, row 7 on its retry; row 12 is dead.
	// The retry of row 7 arrives alone: its batch is handed over when
	// its wait ends (a minute), or when 9 more rows come. Enqueue them.
	got := map[int]bool{}
	for len(got) < 28 {
		got[testutil.Recv(t, b.done, waitLong, "a row written")] = true
	}
	for i := range 9 {
		e.enqueue(t, "rows.write", row{N: 100 + i})
	}
	for len(got) < 38 {
		got[testutil.Recv(t, b.done, waitLong, "a row written")] = true
	}
	if !got[7] || got[12] {
		t.Errorf("rows written %v: want 7 (on its retry) and not 12", got)
	}
	b.mu.Lock()
	if a := b.runs[7]; len(a) != 2 || a[0] != 1 || a[1] != 2 {
		t.Errorf("row 7 ran on attempts %v, want 1 then 2", a)
	}
	for n, a := range b.runs {
		if n != 7 && (len(a) != 1 || a[0] != 1) {
			t.Errorf("row %d ran on attempts %v, want once on the first", n, a)
		}
	}
	for _, s := range b.sizes {
		if s != 10 {
			t.Errorf("batch sizes %v, want every batch full (10)", b.sizes)
			break
		}
	}
	b.mu.Unlock()
	var dead []dlq.Record
	testutil.Wait(t, waitLong, "row 12 dead-lettered", func() bool {
		dead = e.deadLetters(t)
		return len(dead) == 1
	})
	if dead[0].Reason != dlq.ReasonPermanent || !strings.Contains(dead[0].LastError, "row 12") {
		t.Errorf("dead letter %+v", dead[0])
	}
}

// A batch that does not fill is handed over when its wait ends; a payload
// that cannot be decoded fails its own task, not the batch.
func TestBatchHandlerWaitAndDecode(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := newBatches()
	w := e.worker(t)
	framework.HandleBatch(w, "rows.few", framework.Batch{Size: 10, MaxWait: 200 * time.Millisecond}, b.handler)
	startWorker(t, w)
	e.enqueue(t, "rows.few", row{N: 1})
	e.enqueue(t, "rows.few", "not a row")
	e.enqueue(t, "rows.few", row{N: 2})
	got := map[int]bool{}
	for len(got) < 2 {
		got[testutil.Recv(t, b.done, waitLong, "a row written")] = true
	}
	var dead []dlq.Record
	testutil.Wait(t, waitLong, "the bad payload dead-lettered", func() bool {
		dead = e.deadLetters(t)
		return len(dead) == 1
	})
	if dead[0].Reason != dlq.ReasonDecode {
		t.Errorf("dead letter %+v, want reason decode", dead[0])
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	total := 0
	for _, s := range b.sizes {
		total += s
	}
	if total != 2 {
		t.Errorf("batches %v, want the two rows", b.sizes)
	}
}

// A batch larger than the type can run at once is refused at registration.
func TestBatchSizeNeedsConcurrency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, c := range []struct {
		size int
		opts []framework.WorkerOption
		want string
	}{
		{100, nil, "at most 32"},
		{1, nil, "batch size 1"},
		{framework.MaxBatchSize + 1, nil, "batch size"},
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), c.want) {
					t.Errorf("size %d: panic %v, want one saying %q", c.size, r, c.want)
				}
			}()
			framework.HandleBatch(e.worker(t, c.opts...), "rows.big", framework.Batch{Size: c.size},
				func(context.Context, []framework.BatchItem[row]) error { return nil })
		}()
	}
}
