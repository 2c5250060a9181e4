package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// newPartitionedEnv is newEnv on a deployment of n task partitions.
func newPartitionedEnv(t *testing.T, n int) *env {
	t.Helper()
	te := testutil.NewEnv(t, streams.Config{Partitions: n})
	cl, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: te.Server, nc: te.Conn, js: te.JS, cl: cl, parts: n}
}

// TestPartitionsServeEveryTask enqueues immediate, delayed, ordered and
// failing tasks on a deployment of three task partitions: the client
// spreads them over the three streams, one worker serves all of them, each
// task runs once on the stream it was stored in, every key keeps its
// order, and the failures of every partition reach the dead-letter stream
// with their last error, whether the worker wrote them (permanent) or the
// router did (max deliveries).
func TestPartitionsServeEveryTask(t *testing.T) {
	t.Parallel()
	const parts = 3
	e := newPartitionedEnv(t, parts)
	w := e.worker(t, framework.WithConcurrency(16))
	var (
		mu     sync.Mutex
		ranOn  = map[string]string{} // task ID → stream it ran from
		twice  atomic.Int32
		doneCh = make(chan struct{}, 1024)
	)
	w.HandleFunc("part.work", func(_ context.Context, task *framework.Task) error {
		switch {
		case strings.HasPrefix(task.ID, "perm-"):
			return framework.Permanent(errors.New("declined " + task.ID))
		case strings.HasPrefix(task.ID, "fail-"):
			return errors.New("still down " + task.ID)
		}
		mu.Lock()
		if _, ok := ranOn[task.ID]; ok {
			twice.Add(1)
		}
		ranOn[task.ID] = task.Stream
		mu.Unlock()
		doneCh <- struct{}{}
		return nil
	}, framework.WithMaxAttempts(2), dlqFast)
	const keys, events = 12, 5
	c := newOrderChecker(keys * events)
	framework.Handle(w, "part.ordered", func(_ context.Context, _ *framework.Task, ev orderEvent) error {
		c.start(ev)
		c.end(ev, true)
		return nil
	}, framework.WithOrdering(framework.Ordering{Partitions: 4}))
	startWorker(t, w)

	stored := map[string]string{} // task ID → stream the client stored it in
	perStream := map[string]int{}
	var specs []framework.TaskSpec
	for i := range 300 {
		specs = append(specs, framework.TaskSpec{Type: "part.work", Payload: i,
			Options: []framework.EnqueueOption{framework.WithID(fmt.Sprintf("t-%d", i))}})
	}
	infos, err := e.cl.EnqueueMany(t.Context(), specs)
	if err != nil {
		t.Fatal(err)
	}
	for _, info := range infos {
		stored[info.ID] = info.Stream
		perStream[info.Stream]++
	}
	for i := range 9 {
		info := e.enqueue(t, "part.work", i, framework.WithID(fmt.Sprintf("d-%d", i)), framework.In(100*time.Millisecond))
		if !info.ScheduledFor.After(time.Now().Add(-time.Second)) {
			t.Errorf("delayed task %s: scheduled for %v", info.ID, info.ScheduledFor)
		}
		stored[info.ID] = "" // a delayed task reaches its stream when due
	}
	for n := range events {
		for k := range keys {
			key := fmt.Sprintf("acct-%d", k)
			info := e.enqueue(t, "part.ordered", orderEvent{Key: key, N: n}, framework.Ordered(key))
			if want := streams.MustNames("").Partition(topology.PartitionOf(key, parts)).TaskStream(); info.Stream != want {
				t.Errorf("key %s stored in %s, want %s", key, info.Stream, want)
			}
		}
	}
	for i := range 6 {
		prefix := "fail-"
		if i%2 == 0 {
			prefix = "perm-"
		}
		e.enqueue(t, "part.work", i, framework.WithID(fmt.Sprintf("%s%d", prefix, i)))
	}
	for k := range parts {
		name := streams.MustNames("").Partition(k).TaskStream()
		if perStream[name] < 50 {
			t.Errorf("stream %s got %d of 300 tasks: %v", name, perStream[name], perStream)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	for range 309 {
		select {
		case <-doneCh:
		case <-ctx.Done():
			mu.Lock()
			t.Fatalf("%d of 309 tasks ran", len(ranOn))
		}
	}
	c.wait(t)
	mu.Lock()
	for id, s := range stored {
		got, ok := ranOn[id]
		switch {
		case !ok:
			t.Errorf("task %s never ran", id)
		case s != "" && got != s:
			t.Errorf("task %s stored in %s ran from %s", id, s, got)
		}
	}
	mu.Unlock()
	if n := twice.Load(); n > 0 {
		t.Errorf("%d tasks ran twice", n)
	}
	records := e.waitDeadLetters(t, 6)
	seen := map[string]bool{}
	for _, r := range records {
		seen[r.TaskID] = true
		if !strings.Contains(r.LastError, r.TaskID) {
			t.Errorf("dead letter %s (%s, from %s): last error %q is not its own", r.TaskID, r.RoutedBy, r.OriginalSubject, r.LastError)
		}
	}
	for i := range 6 {
		prefix := "fail-"
		if i%2 == 0 {
			prefix = "perm-"
		}
		if id := fmt.Sprintf("%s%d", prefix, i); !seen[id] {
			t.Errorf("no dead letter for %s: %v", id, records)
		}
	}
	// Nothing left behind in any partition.
	for k := range parts {
		name := streams.MustNames("").Partition(k).TaskStream()
		testutil.Wait(t, waitLong, name+" empty", func() bool { return e.dlqStreamMsgs(t, name, "") == 0 })
	}
}

// TestClientPartitionOption: WithPartitions pins the count without
// reading it, and refuses one out of range.
func TestClientPartitionOption(t *testing.T) {
	t.Parallel()
	e := newPartitionedEnv(t, 2)
	if _, err := framework.NewClient(e.nc, framework.WithPartitions(0)); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("WithPartitions(0): %v", err)
	}
	one, err := framework.NewClient(e.nc, framework.WithPartitions(1))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		info, err := one.Enqueue(t.Context(), "part.one", i)
		if err != nil {
			t.Fatal(err)
		}
		if info.Stream != "JETFLOW_TASKS" {
			t.Fatalf("a client pinned to one partition stored in %s", info.Stream)
		}
	}
	four, err := framework.NewClient(e.nc, framework.WithPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	var failed int
	for i := range 20 {
		if _, err := four.Enqueue(t.Context(), "part.four", i, framework.WithID(fmt.Sprintf("x-%d", i))); err != nil {
			failed++
		}
	}
	if failed == 0 {
		t.Error("a client pinned to 4 partitions of 2 stored every task")
	}
}

// TestPartitionsKeepTheirOwnErrors: two tasks at the same sequence of two
// partitions' streams fail with different errors; the one of the second
// partition dies with its worker in its last attempt, so the router (of
// the replacement worker) routes it from its partition's advisory and
// writes its record from the errors bucket, after the other task's failure
// was recorded there. The record keeps its own last error: the bucket keys
// the partitions apart.
func TestPartitionsKeepTheirOwnErrors(t *testing.T) {
	t.Parallel()
	const typ = "part.err"
	e := newPartitionedEnv(t, 2)
	ids := [2]string{}
	for i := 0; ids[1] == "" || ids[0] == ""; i++ {
		id := fmt.Sprintf("e-%d", i)
		if k := topology.PartitionOf(id, 2); ids[k] == "" {
			ids[k] = id
		}
	}
	opts := []framework.HandlerOption{framework.WithMaxAttempts(2), framework.WithAckWait(300 * time.Millisecond), dlqFast}
	failedOnce := make(chan struct{})
	var once sync.Once
	nc := testutil.Connect(t, e.srv)
	dying, err := framework.NewWorker(nc, framework.WithDeadLetterRouter(false), framework.WithConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	dying.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		if task.ID == ids[1] {
			if task.Attempt == task.MaxAttempts {
				nc.Close() // the worker dies mid-task: no record written
				return nil
			}
			defer once.Do(func() { close(failedOnce) })
		}
		return errors.New("error of " + task.ID)
	}, opts...)
	startWorker(t, dying)
	if info := e.enqueue(t, typ, 0, framework.WithID(ids[1])); info.Sequence != 1 {
		t.Fatalf("task %s at sequence %d of %s, want the first", ids[1], info.Sequence, info.Stream)
	}
	testutil.Recv(t, failedOnce, waitLong, "first failure")
	if info := e.enqueue(t, typ, 1, framework.WithID(ids[0])); info.Sequence != 1 {
		t.Fatalf("task %s at sequence %d of %s, want the first", ids[0], info.Sequence, info.Stream)
	}
	rw := e.worker(t)
	rw.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		return errors.New("error of " + task.ID)
	}, opts...)
	startWorker(t, rw)
	for _, r := range e.waitDeadLetters(t, 2) {
		if r.LastError != "error of "+r.TaskID {
			t.Errorf("dead letter %s (%s, routed by %s): last error %q", r.TaskID, r.OriginalSubject, r.RoutedBy, r.LastError)
		}
	}
}

// TestPartitionsSeenAsOneQueue: the operator's views add the partitions up
// (a queue's waiting tasks of every partition, a load per partition, every
// task stream in the overview), and pausing a queue pauses it in every
// partition.
func TestPartitionsSeenAsOneQueue(t *testing.T) {
	t.Parallel()
	e := newPartitionedEnv(t, 3)
	ctx := t.Context()
	w := e.worker(t)
	w.HandleFunc("part.q", func(context.Context, *framework.Task) error { return nil })
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Shutdown(ctx); err != nil { // the consumers stay, nobody pulls
		t.Fatal(err)
	}
	for i := range 60 {
		e.enqueue(t, "part.q", i)
	}
	op := inspect.New(e.cl)
	var st *inspect.QueueStats
	var pending int
	// A consumer counts a stored task a moment after the store
	// acknowledged it.
	testutil.Wait(t, waitLong, "60 tasks pending", func() bool {
		var err error
		if st, err = op.QueueStats(ctx); err != nil {
			t.Fatal(err)
		}
		for _, q := range st.Queues {
			if q.Type == "part.q" && q.Priority == framework.PriorityNormal {
				pending = q.Pending
			}
		}
		return pending == 60
	})
	if pending != 60 || len(st.Partitions) != 3 {
		t.Fatalf("queue stats: %d pending, partitions %+v", pending, st.Partitions)
	}
	sum := 0
	for k, p := range st.Partitions {
		if p.Partition != k || p.Pending == 0 || p.Stream != streams.MustNames("").Partition(k).TaskStream() {
			t.Errorf("partition %d: %+v", k, p)
		}
		sum += p.Pending
	}
	if sum != 60 {
		t.Errorf("partitions hold %d tasks, want 60", sum)
	}
	acts, err := op.QueueActivity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range acts {
		if a.Type == "part.q" && a.Priority == framework.PriorityNormal && a.Waiting != 60 {
			t.Errorf("activity: %d waiting, want 60", a.Waiting)
		}
	}
	ov, err := op.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	taskStreams := 0
	for _, s := range ov.Streams {
		if strings.HasPrefix(s.Name, "JETFLOW_TASKS") {
			taskStreams++
		}
	}
	if taskStreams != 3 {
		t.Errorf("overview lists %d task streams, want 3", taskStreams)
	}
	if err := op.PauseQueue(ctx, "part.q", framework.PriorityNormal, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for k := range 3 {
		stream := streams.MustNames("").Partition(k).TaskStream()
		c, err := e.js.Consumer(ctx, stream, streams.MustNames("").ConsumerName("part.q", framework.PriorityNormal))
		if err != nil {
			t.Fatal(err)
		}
		if !c.CachedInfo().Paused {
			t.Errorf("queue not paused in %s", stream)
		}
	}
}

// TestPartitionsStrandedReported: a task at a priority the worker does not
// serve, stored in a partition other than the first, is reported stranded
// at Start like one in the first.
func TestPartitionsStrandedReported(t *testing.T) {
	t.Parallel()
	e := newPartitionedEnv(t, 3)
	var id string
	for i := 0; id == ""; i++ {
		if c := fmt.Sprintf("s-%d", i); topology.PartitionOf(c, 3) == 2 {
			id = c
		}
	}
	info := e.enqueue(t, "part.s", nil, framework.WithID(id), framework.WithPriority(framework.PriorityLow))
	if info.Stream != "JETFLOW_TASKS_P2" {
		t.Fatalf("stored in %s", info.Stream)
	}
	w := e.worker(t)
	w.HandleFunc("part.s", func(context.Context, *framework.Task) error { return nil },
		framework.WithServedPriorities(framework.PriorityNormal))
	startWorker(t, w)
	got := w.Stranded()
	if len(got) != 1 || got[0].Subject != "jetflow.p2.task.low.part.s" || got[0].Tasks != 1 {
		t.Errorf("stranded %+v, want the low-priority subject of partition 2", got)
	}
}

// TestPartitionsAddedWhileRunning: partitions added to a live deployment
// (jetflow partitions add) are served by a running worker within its
// stranded check: ordered and plain tasks a new producer spreads over them
// run, and a failure there is dead-lettered with its record. Nothing
// waits for a restart.
func TestPartitionsAddedWhileRunning(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ran := make(chan string, 512)
	w := e.worker(t, framework.WithTimings(framework.Timings{StrandedCheck: time.Second}))
	w.HandleFunc("part.grow", func(_ context.Context, task *framework.Task) error {
		if strings.HasPrefix(task.ID, "perm-") {
			return framework.Permanent(errors.New("declined " + task.ID))
		}
		ran <- task.ID
		return nil
	})
	framework.Handle(w, "part.grow.ordered", func(_ context.Context, task *framework.Task, _ int) error {
		ran <- task.ID
		return nil
	}, framework.WithOrdering(framework.Ordering{Partitions: 2}))
	startWorker(t, w)
	if got := w.TaskStreams(); len(got) != 1 {
		t.Fatalf("task streams before: %v", got)
	}
	// Ordered tasks of keys enqueued before the change.
	before := map[string]string{}
	for k := range 7 {
		info := e.enqueue(t, "part.grow.ordered", -1, framework.WithID(fmt.Sprintf("b-%d", k)), framework.Ordered(fmt.Sprintf("k-%d", k)))
		before[fmt.Sprintf("k-%d", k)] = info.Stream
	}
	if _, err := streams.Ensure(t.Context(), e.js, streams.Config{Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	cl, err := framework.NewClient(e.nc) // a producer started after the change
	if err != nil {
		t.Fatal(err)
	}
	perStream := map[string]int{}
	want := map[string]bool{}
	for i := range 60 {
		id := fmt.Sprintf("g-%d", i)
		info, err := cl.Enqueue(t.Context(), "part.grow", i, framework.WithID(id))
		if err != nil {
			t.Fatal(err)
		}
		perStream[info.Stream]++
		want[id] = true
		oid, key := fmt.Sprintf("o-%d", i), fmt.Sprintf("k-%d", i%7)
		oinfo, err := cl.Enqueue(t.Context(), "part.grow.ordered", i, framework.WithID(oid), framework.Ordered(key))
		if err != nil {
			t.Fatal(err)
		}
		if oinfo.Stream != before[key] {
			t.Errorf("key %s moved from %s to %s with the added partitions: its order would not hold", key, before[key], oinfo.Stream)
		}
		want[oid] = true
	}
	if len(perStream) != 3 {
		t.Fatalf("the new producer stored in %v, want 3 streams", perStream)
	}
	var perm string
	for i := 0; perm == ""; i++ {
		if id := fmt.Sprintf("perm-%d", i); topology.PartitionOf(id, 3) == 2 {
			perm = id
		}
	}
	if _, err := cl.Enqueue(t.Context(), "part.grow", 0, framework.WithID(perm)); err != nil {
		t.Fatal(err)
	}
	for k := range 7 {
		want[fmt.Sprintf("b-%d", k)] = true
	}
	timeout := time.After(waitLong)
	for len(want) > 0 {
		select {
		case id := <-ran:
			delete(want, id)
		case <-timeout:
			t.Fatalf("%d tasks never ran (task streams served: %v)", len(want), w.TaskStreams())
		}
	}
	if got := w.TaskStreams(); len(got) != 3 {
		t.Errorf("task streams after: %v", got)
	}
	if d := e.waitDeadLetters(t, 1)[0]; d.TaskID != perm || !strings.HasPrefix(d.OriginalSubject, "jetflow.p2.") {
		t.Errorf("dead letter %s from %s, want %s from partition 2", d.TaskID, d.OriginalSubject, perm)
	}
}
