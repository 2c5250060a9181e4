package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// listOf returns a list step function returning 0..n-1.
func listOf(n int) func(context.Context, struct{}) ([]int, error) {
	return func(context.Context, struct{}) ([]int, error) {
		l := make([]int, n)
		for i := range l {
			l[i] = i
		}
		return l, nil
	}
}

// joinInto returns a join step that sends the results of step "each" to got.
func joinInto(got chan<- []int, runs *counter) func(context.Context, struct{}) (int, error) {
	return func(ctx context.Context, _ struct{}) (int, error) {
		runs.inc("join")
		res, err := workflow.Results[int](ctx, "each")
		if err != nil {
			return 0, err
		}
		got <- res
		return len(res), nil
	}
}

// checkDoubled checks that res is 0, 2, 4… (item i doubled), n of them.
func checkDoubled(t *testing.T, res []int, n int) {
	t.Helper()
	if len(res) != n {
		t.Fatalf("join got %d results, want %d", len(res), n)
	}
	for i, v := range res {
		if v != 2*i {
			t.Fatalf("result %d is %d, want %d (results out of item order)", i, v, 2*i)
		}
	}
}

// TestForEachJoinsInOrderWithinMaxParallel fans out 2,000 items with at
// most 8 in flight on a worker that could run 64: the join gets every
// result in item order, and the handler never sees more than 8 at once.
func TestForEachJoinsInOrderWithinMaxParallel(t *testing.T) {
	t.Parallel()
	const n, parallel = 2000, 8
	e := newEnv(t)
	var inFlight, peak atomic.Int32
	runs := newCounter()
	got := make(chan []int, 1)
	d := workflow.New("fan", workflow.WithMaxOutputBytes(1<<20))
	workflow.Step(d, "list", listOf(n))
	workflow.ForEach(d, "each", "list", func(ctx context.Context, item int) (int, error) {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		runs.inc(fmt.Sprint("item", item))
		return 2 * item, nil
	}, workflow.MaxParallel(parallel))
	workflow.Step(d, "join", joinInto(got, runs), workflow.After("each"))
	w, _ := e.worker(t, []*workflow.Definition{d}, framework.WithConcurrency(64))
	startWorker(t, w)
	c := e.client(t, d)

	r := wait(t, c, start(t, c, "fan", nil))
	if r.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	checkDoubled(t, testutil.Recv(t, got, waitLong, "join results"), n)
	if p := peak.Load(); p > parallel {
		t.Errorf("%d items ran at once, MaxParallel is %d", p, parallel)
	}
	if runs.get("join") != 1 {
		t.Errorf("join ran %d times, want 1", runs.get("join"))
	}
	st := r.Step("each")
	if st.Items != n || st.ItemsDone != n || st.ItemsFailed != 0 {
		t.Errorf("progress %d/%d (%d failed), want %d/%d", st.ItemsDone, st.Items, st.ItemsFailed, n, n)
	}
	if string(st.Output) != fmt.Sprintf(`{"items":%d,"failed":0}`, n) {
		t.Errorf("fan-out output %s", st.Output)
	}
	// The item subjects do not show as runs.
	runsListed, _, err := c.List(t.Context(), workflow.RunFilter{})
	if err != nil || len(runsListed) != 1 {
		t.Fatalf("List: %d runs, %v; want 1", len(runsListed), err)
	}
}

// TestForEachProgress reads done/total with Status while a fan-out runs.
func TestForEachProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gate := make(chan struct{})
	d := workflow.New("progress")
	workflow.Step(d, "list", listOf(20))
	workflow.ForEach(d, "each", "list", func(ctx context.Context, item int) (int, error) {
		if item >= 5 {
			select {
			case <-gate:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		return item, nil
	}, workflow.MaxParallel(20))
	w, _ := e.worker(t, []*workflow.Definition{d}, framework.WithConcurrency(32))
	startWorker(t, w)
	c := e.client(t, d)
	id := start(t, c, "progress", nil)
	waitStatus(t, c, id, "5 of 20 items done", func(r *workflow.Run) bool {
		st := r.Step("each")
		return st.State == workflow.StepFanningOut && st.Items == 20 && st.ItemsDone == 5
	})
	close(gate)
	if r := wait(t, c, id); r.Status != workflow.RunCompleted || r.Step("each").ItemsDone != 20 {
		t.Fatalf("run %s (%s), %d items done", r.Status, r.Error, r.Step("each").ItemsDone)
	}
}

// TestForEachFailFastCompensates fails one item for good: the run fails,
// the steps before the fan-out are compensated, the join never runs and
// the failed item starts no other.
func TestForEachFailFastCompensates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := newCounter()
	compensated := make(chan struct{}, 1)
	d := workflow.New("failfast")
	workflow.Step(d, "list", listOf(50), workflow.Compensate(func(context.Context, struct{}, []int) error {
		compensated <- struct{}{}
		return nil
	}))
	workflow.ForEach(d, "each", "list", func(ctx context.Context, item int) (int, error) {
		runs.inc("item")
		if item == 3 {
			return 0, framework.Permanent(errors.New("item three is bad"))
		}
		return item, nil
	}, workflow.MaxParallel(1))
	workflow.Step(d, "join", joinInto(make(chan []int, 1), runs), workflow.After("each"))
	c := e.run(t, d)

	r := wait(t, c, start(t, c, "failfast", nil))
	if r.Status != workflow.RunFailed || !strings.Contains(r.Error, "item 3: ") || !strings.Contains(r.Error, "item three is bad") {
		t.Fatalf("run %s: %q", r.Status, r.Error)
	}
	testutil.Recv(t, compensated, waitLong, "compensation of list")
	checkState(t, r, "list", workflow.StepCompensated)
	checkState(t, r, "each", workflow.StepFailed)
	checkState(t, r, "join", workflow.StepSkipped)
	if runs.get("join") != 0 {
		t.Error("the join ran after a failed item")
	}
	// One at a time: item 3 never gets a result, so it releases no other
	// item.
	if got := runs.get("item"); got != 4 {
		t.Errorf("%d items ran, want 4 (0 to 3)", got)
	}
}

// TestForEachCollectErrors lets every item run and reports the failures
// to the join.
func TestForEachCollectErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	got := make(chan []workflow.ItemResult[int], 1)
	resultsErr := make(chan error, 1)
	d := workflow.New("collect")
	workflow.Step(d, "list", listOf(10))
	workflow.ForEach(d, "each", "list", func(ctx context.Context, item int) (int, error) {
		if item%4 == 1 {
			return 0, framework.Permanent(fmt.Errorf("item %d is bad", item))
		}
		return 2 * item, nil
	}, workflow.CollectErrors(), workflow.MaxParallel(3))
	workflow.Step(d, "join", func(ctx context.Context, _ struct{}) (int, error) {
		_, err := workflow.Results[int](ctx, "each")
		resultsErr <- err
		res, err := workflow.ItemResults[int](ctx, "each")
		if err != nil {
			return 0, err
		}
		got <- res
		fo, err := workflow.Output[workflow.FanOut](ctx, "each")
		return fo.Failed, err
	}, workflow.After("each"))
	c := e.run(t, d)

	r := wait(t, c, start(t, c, "collect", nil))
	if r.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	if err := testutil.Recv(t, resultsErr, waitLong, "Results"); !errors.Is(err, workflow.ErrItemFailed) {
		t.Errorf("Results with failed items: %v, want ErrItemFailed", err)
	}
	res := testutil.Recv(t, got, waitLong, "ItemResults")
	if len(res) != 10 {
		t.Fatalf("%d results, want 10", len(res))
	}
	for i, ir := range res {
		if i%4 == 1 {
			if !errors.Is(ir.Err, workflow.ErrItemFailed) || !strings.Contains(ir.Err.Error(), fmt.Sprintf("item %d is bad", i)) {
				t.Errorf("item %d: error %v", i, ir.Err)
			}
			continue
		}
		if ir.Err != nil || ir.Value != 2*i {
			t.Errorf("item %d: %d, %v; want %d", i, ir.Value, ir.Err, 2*i)
		}
	}
	if st := r.Step("each"); st.ItemsFailed != 3 || string(r.Step("join").Output) != "3" {
		t.Errorf("items failed %d, join saw %s; want 3", st.ItemsFailed, r.Step("join").Output)
	}
}

// TestForEachOverLimit fails a fan-out over MaxItems items with
// ErrTooManyItems, before any item runs.
func TestForEachOverLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var ran atomic.Int32
	d := workflow.New("limit", workflow.WithMaxOutputBytes(1<<20))
	workflow.Step(d, "list", func(context.Context, struct{}) ([]int, error) {
		return make([]int, workflow.MaxItems+1), nil
	})
	workflow.ForEach(d, "each", "list", func(ctx context.Context, item int) (int, error) {
		ran.Add(1)
		return item, nil
	})
	c := e.run(t, d)
	r := wait(t, c, start(t, c, "limit", nil))
	if r.Status != workflow.RunFailed || !strings.Contains(r.Error, workflow.ErrTooManyItems.Error()) ||
		!strings.Contains(r.Error, "100001 items") {
		t.Fatalf("run %s: %q; want a failure naming ErrTooManyItems and the count", r.Status, r.Error)
	}
	if ran.Load() != 0 {
		t.Errorf("%d items ran", ran.Load())
	}
}

// TestForEachDefinitionErrors checks what Validate says of misused
// fan-outs.
func TestForEachDefinitionErrors(t *testing.T) {
	t.Parallel()
	item := func(ctx context.Context, s string) (int, error) { return len(s), nil }
	for _, tc := range []struct {
		name  string
		build func(d *workflow.Definition)
		want  string
	}{
		{"list of another type", func(d *workflow.Definition) {
			workflow.Step(d, "list", listOf(1))
			workflow.ForEach(d, "each", "list", item)
		}, "want a []string"},
		{"unknown list step", func(d *workflow.Definition) {
			workflow.ForEach(d, "each", "nope", item)
		}, "unknown step"},
		{"MaxParallel on a plain step", func(d *workflow.Definition) {
			workflow.Step(d, "list", listOf(1), workflow.MaxParallel(3))
		}, "ForEach steps only"},
		{"MaxParallel zero", func(d *workflow.Definition) {
			workflow.Step(d, "list", func(context.Context, struct{}) ([]string, error) { return nil, nil })
			workflow.ForEach(d, "each", "list", item, workflow.MaxParallel(0))
		}, "max parallel 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := workflow.New("bad")
			tc.build(d)
			err := d.Validate()
			if !errors.Is(err, workflow.ErrInvalidDefinition) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate: %v; want %q", err, tc.want)
			}
		})
	}
}

// TestForEachWorkerKilled closes the connection of a worker while it runs
// items (and loses the ack of an item already counted): a second worker
// finishes the fan-out, every item has one result, and the join runs once.
func TestForEachWorkerKilled(t *testing.T) {
	t.Parallel()
	const n = 200
	e := newEnv(t)
	runs := newCounter()
	got := make(chan []int, 2)
	blocked := make(chan struct{}, 1)
	release := make(chan struct{})
	defer close(release)
	newDef := func(first bool) *workflow.Definition {
		d := workflow.New("kill", workflow.WithMaxOutputBytes(1<<20))
		workflow.Step(d, "list", listOf(n))
		workflow.ForEach(d, "each", "list", func(ctx context.Context, item int) (int, error) {
			runs.inc(fmt.Sprint("item", item))
			if first && item == 50 {
				blocked <- struct{}{}
				select { // never finishes on the first worker
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-release:
					return 0, errors.New("released after the test")
				}
			}
			return 2 * item, nil
		}, workflow.MaxParallel(10), workflow.WithTaskOptions(framework.WithAckWait(time.Second), fast))
		workflow.Step(d, "join", joinInto(got, runs), workflow.After("each"))
		return d
	}
	var lost atomic.Int32
	loseAck := func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			err := next.Handle(ctx, t)
			if err == nil && t.Header(workflow.HeaderItem) == "7" && lost.Add(1) == 1 {
				return errors.New("simulated crash after the item was counted")
			}
			return err
		})
	}
	w1, nc1 := e.worker(t, []*workflow.Definition{newDef(true)}, framework.WithConcurrency(16), framework.WithMiddleware(loseAck))
	if err := w1.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w1.Shutdown(ctx)
	})
	c := e.client(t, newDef(false))
	id := start(t, c, "kill", nil)
	testutil.Recv(t, blocked, waitLong, "item 50 started on the first worker")
	nc1.Close()
	w2, _ := e.worker(t, []*workflow.Definition{newDef(false)}, framework.WithConcurrency(16))
	startWorker(t, w2)

	r := wait(t, c, id)
	if r.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	checkDoubled(t, testutil.Recv(t, got, waitLong, "join results"), n)
	if runs.get("join") != 1 {
		t.Errorf("join ran %d times, want 1", runs.get("join"))
	}
	if runs.get("item50") < 2 {
		t.Errorf("item 50 ran %d times, want a second run after the kill", runs.get("item50"))
	}
	for i := range n {
		if runs.get(fmt.Sprint("item", i)) == 0 {
			t.Errorf("item %d never ran", i)
		}
	}
	if st := r.Step("each"); st.ItemsDone != n {
		t.Errorf("%d items counted, want %d", st.ItemsDone, n)
	}
}

// TestForEachSurvivesServerRestart restarts the server on its store while
// a fan-out has items in flight: a new worker finishes it, and the join
// gets every result in item order, once.
func TestForEachSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	const n = 100
	te := testutil.NewEnv(t, streams.Config{}, testutil.WithListen())
	fc, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: te.Server, nc: te.Conn, js: te.JS, fc: fc}
	runs := newCounter()
	got := make(chan []int, 2)
	blocked := make(chan struct{}, n)
	newDef := func(first bool) *workflow.Definition {
		d := workflow.New("restart", workflow.WithMaxOutputBytes(1<<20))
		workflow.Step(d, "list", listOf(n))
		workflow.ForEach(d, "each", "list", func(ctx context.Context, item int) (int, error) {
			if first && item >= 30 {
				blocked <- struct{}{}
				<-ctx.Done() // held until the worker stops
				return 0, ctx.Err()
			}
			return 2 * item, nil
		}, workflow.MaxParallel(10), workflow.WithTaskOptions(framework.WithAckWait(time.Second), fast))
		workflow.Step(d, "join", joinInto(got, runs), workflow.After("each"))
		return d
	}
	w, _ := e.worker(t, []*workflow.Definition{newDef(true)}, framework.WithConcurrency(16))
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := e.client(t, newDef(false))
	id := start(t, c, "restart", nil)
	testutil.Recv(t, blocked, waitLong, "an item held on the first worker")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	_ = w.Shutdown(ctx) // the held items are cut short
	srv := testutil.RestartServer(t, e.srv)
	e.srv = srv
	testutil.Wait(t, waitLong, "server back", func() bool { return srv.JetStreamEnabled() && e.nc.IsConnected() })
	w2, _ := e.worker(t, []*workflow.Definition{newDef(false)}, framework.WithConcurrency(16))
	startWorker(t, w2)
	var done *workflow.Run
	testutil.Wait(t, waitLong, "run final after the restart", func() bool {
		r, err := c.Status(t.Context(), id) // errors while the connection comes back are expected
		done = r
		return err == nil && r.Status.Final()
	})
	if done.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", done.Status, done.Error)
	}
	checkDoubled(t, testutil.Recv(t, got, waitLong, "join results"), n)
	if runs.get("join") != 1 {
		t.Errorf("join ran %d times, want 1", runs.get("join"))
	}
}

// TestForEachCancel cancels a run mid fan-out: the step is skipped, the
// items in flight start no others, and the join never runs.
func TestForEachCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := newCounter()
	started := make(chan struct{}, 100)
	gate := make(chan struct{})
	d := workflow.New("cancelfan")
	workflow.Step(d, "list", listOf(100))
	workflow.ForEach(d, "each", "list", func(ctx context.Context, item int) (int, error) {
		runs.inc("item")
		started <- struct{}{}
		<-gate
		return item, nil
	}, workflow.MaxParallel(2))
	workflow.Step(d, "join", joinInto(make(chan []int, 1), runs), workflow.After("each"))
	var handled atomic.Int32
	countItems := func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			err := next.Handle(ctx, t)
			if t.Header(workflow.HeaderItem) != "" {
				handled.Add(1)
			}
			return err
		})
	}
	w, _ := e.worker(t, []*workflow.Definition{d}, framework.WithMiddleware(countItems))
	startWorker(t, w)
	c := e.client(t, d)
	id := start(t, c, "cancelfan", nil)
	testutil.Recv(t, started, waitLong, "an item running")
	if err := c.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	close(gate)
	r := wait(t, c, id)
	if r.Status != workflow.RunCancelled {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	checkState(t, r, "each", workflow.StepSkipped)
	// The items in flight (item 0, and item 1 unless it saw the
	// cancellation first) finish; the items they release find the run
	// cancelled and do not run. Item 0 releases one at least: three tasks.
	testutil.Wait(t, waitLong, "3 item tasks handled", func() bool { return handled.Load() >= 3 })
	if got := runs.get("item"); got > 2 || runs.get("join") != 0 {
		t.Errorf("%d items and %d joins ran after the cancellation", got, runs.get("join"))
	}
}
