package framework_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
)

// orderEvent is the payload of the ordering tests.
type orderEvent struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// orderChecker records the runs of ordered tasks and finds violations: a
// task of a key starting while another of the key runs, or a key's task
// succeeding before an earlier one did.
type orderChecker struct {
	mu         sync.Mutex
	running    map[string]int
	next       map[string]int // next event expected to succeed, per key
	violations []string
	succeeded  int
	done       chan struct{}
	want       int
}

func newOrderChecker(want int) *orderChecker {
	return &orderChecker{running: map[string]int{}, next: map[string]int{}, done: make(chan struct{}), want: want}
}

func (c *orderChecker) start(ev orderEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[ev.Key]++
	if c.running[ev.Key] > 1 {
		c.violations = append(c.violations, fmt.Sprintf("%s/%d started while another task of the key ran", ev.Key, ev.N))
	}
	if ev.N > c.next[ev.Key] {
		c.violations = append(c.violations, fmt.Sprintf("%s/%d started before %s/%d succeeded", ev.Key, ev.N, ev.Key, c.next[ev.Key]))
	}
}

// end records the end of a run; ok means it succeeded. A repeat of an
// event that already succeeded (at-least-once after a lost ack) is allowed.
func (c *orderChecker) end(ev orderEvent, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[ev.Key]--
	if !ok || ev.N < c.next[ev.Key] {
		return
	}
	c.next[ev.Key] = ev.N + 1
	c.succeeded++
	if c.succeeded == c.want {
		close(c.done)
	}
}

func (c *orderChecker) wait(t *testing.T) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(waitLong):
		c.mu.Lock()
		defer c.mu.Unlock()
		t.Fatalf("%d of %d ordered tasks succeeded in order; violations: %v", c.succeeded, c.want, c.violations[:min(5, len(c.violations))])
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.violations) > 0 {
		t.Fatalf("%d ordering violations, first: %v", len(c.violations), c.violations[:min(5, len(c.violations))])
	}
}

// Three workers on separate connections: each key's tasks run one at a time
// in enqueue order, including tasks that fail once and are retried.
func TestOrderedTasksRunInOrderAcrossWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const keys, events = 40, 4
	c := newOrderChecker(keys * events)
	var failMu sync.Mutex
	failed := map[string]bool{}
	var parallel sync.Map // key → seen concurrently with another key
	var active sync.Map
	for range 3 {
		w := e.worker(t, framework.WithConcurrency(8))
		framework.Handle(w, "order.event", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
			c.start(ev)
			active.Store(ev.Key, true)
			n := 0
			active.Range(func(any, any) bool { n++; return true })
			if n > 1 {
				parallel.Store(ev.Key, true)
			}
			defer active.Delete(ev.Key)
			id := fmt.Sprintf("%s/%d", ev.Key, ev.N)
			failMu.Lock()
			fail := ev.N == 1 && !failed[id] && len(ev.Key)%2 == 0
			failed[id] = true
			failMu.Unlock()
			if fail {
				c.end(ev, false)
				return framework.RetryAfterErr(20*time.Millisecond, errors.New("fails once"))
			}
			select { // some work, so keys overlap
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
			}
			c.end(ev, true)
			return nil
		}, framework.WithOrdering(framework.Ordering{Partitions: 8}))
		startWorker(t, w)
	}
	// Interleaved: event n of every key, then event n+1.
	for n := range events {
		for k := range keys {
			key := fmt.Sprintf("order-%d", 1000+k*7)
			e.enqueue(t, "order.event", orderEvent{Key: key, N: n}, framework.Ordered(key))
		}
	}
	c.wait(t)
	got := 0
	parallel.Range(func(any, any) bool { got++; return true })
	if got == 0 {
		t.Fatal("no two keys ever ran at the same time: ordering serialised everything")
	}
}

func TestOrderedEnqueueRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, tc := range map[string]struct {
		opts []framework.EnqueueOption
		want error
	}{
		"priority":    {[]framework.EnqueueOption{framework.Ordered("k"), framework.WithPriority(framework.PriorityHigh)}, framework.ErrOrdering},
		"delay":       {[]framework.EnqueueOption{framework.Ordered("k"), framework.In(time.Minute)}, framework.ErrOrdering},
		"at":          {[]framework.EnqueueOption{framework.At(time.Now().Add(time.Hour)), framework.Ordered("k")}, framework.ErrOrdering},
		"empty key":   {[]framework.EnqueueOption{framework.Ordered("")}, framework.ErrInvalidOption},
		"newline key": {[]framework.EnqueueOption{framework.Ordered("a\r\nNats-Rollup: all")}, framework.ErrInvalidOption},
		"long key":    {[]framework.EnqueueOption{framework.Ordered(string(make([]byte, framework.MaxOrderingKeyLen+1)))}, framework.ErrInvalidOption},
	} {
		if _, err := e.cl.Enqueue(t.Context(), "order.bad", nil, tc.opts...); !errors.Is(err, tc.want) || !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want %v", name, err, tc.want)
		}
	}
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Fatalf("%d messages stored", n)
	}
}

// A worker that dies holding a key's head task (its connection is cut, its
// handler never returns) does not let the key's next task run: the head is
// redelivered to another worker after the ack wait, then the rest follows in
// order.
func TestOrderedHeadSurvivesWorkerDeath(t *testing.T) {
	t.Parallel()
	headSurvivesWorkerDeath(t, "order.kill", framework.Ordering{Partitions: 1}, time.Second)
}

// headSurvivesWorkerDeath runs the worker-death test of an ordered type
// with ordering o: a dead worker holds the key's head, a live one runs the
// head again (attempt 2) before the key's next tasks. Both workers write
// their registry records every second, so that a dead worker's lanes move
// once its record expired.
func headSurvivesWorkerDeath(t *testing.T, typ string, o framework.Ordering, ackWait time.Duration) {
	e := newEnv(t)
	c := newOrderChecker(3)
	opts := []framework.HandlerOption{framework.WithOrdering(o), framework.WithAckWait(ackWait)}
	fast := framework.WithTimings(framework.Timings{RegistryInterval: framework.MinRegistryInterval})

	headTaken := make(chan struct{})
	release := make(chan struct{})
	deadNC := testutil.Connect(t, e.srv)
	dead, err := framework.NewWorker(deadNC, fast)
	if err != nil {
		t.Fatal(err)
	}
	framework.Handle(dead, typ, func(ctx context.Context, task *framework.Task, ev orderEvent) error {
		close(headTaken)
		<-release // "killed": never returns while the test watches
		return nil
	}, opts...)
	startWorker(t, dead)

	e.enqueue(t, typ, orderEvent{Key: "k", N: 0}, framework.Ordered("k"))
	select {
	case <-headTaken:
	case <-time.After(waitLong):
		t.Fatal("the head task never started")
	}
	deadNC.Close() // no heartbeat, no ack, no pull: as after kill -9

	attempts := make(chan int, 3)
	live := e.worker(t, fast)
	framework.Handle(live, typ, func(ctx context.Context, task *framework.Task, ev orderEvent) error {
		c.start(ev)
		if ev.N == 0 {
			attempts <- task.Attempt
		}
		c.end(ev, true)
		return nil
	}, opts...)
	startWorker(t, live)
	for n := 1; n < 3; n++ {
		e.enqueue(t, typ, orderEvent{Key: "k", N: n}, framework.Ordered("k"))
	}
	c.wait(t)
	if a := <-attempts; a != 2 {
		t.Fatalf("the head ran on the live worker as attempt %d, want 2 (a redelivery)", a)
	}
	close(release)
}

// A server restart (same store) in the middle of a run loses no task and
// keeps every key in order.
func TestOrderedTasksSurviveServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testutil.WithListen())
	const keys, events = 10, 6
	c := newOrderChecker(keys * events)
	gate := make(chan struct{})
	var once sync.Once
	for range 2 {
		w := e.worker(t, framework.WithConcurrency(4))
		framework.Handle(w, "order.restart", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
			c.start(ev)
			if ev.N == 2 {
				once.Do(func() { close(gate) })
			}
			c.end(ev, true)
			return nil
		}, framework.WithOrdering(framework.Ordering{Partitions: 4}), framework.WithAckWait(2*time.Second))
		startWorker(t, w)
	}
	for n := range events {
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			e.enqueue(t, "order.restart", orderEvent{Key: key, N: n}, framework.Ordered(key))
		}
	}
	select {
	case <-gate:
	case <-time.After(waitLong):
		t.Fatal("no task of the third event ran")
	}
	testutil.RestartServer(t, e.srv)
	c.wait(t)
}

// After a task fails for good the key moves on to its next task; the dead
// letter replays into the key's queue.
func TestOrderedDeadLetterMovesOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := newOrderChecker(3)
	w := e.worker(t)
	framework.Handle(w, "order.dead", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
		c.start(ev)
		if ev.N == 1 && task.Header("X-Replayed") == "" && task.Header(dlq.HeaderReplayedFromSeq) == "" {
			c.end(ev, false)
			return framework.Permanent(errors.New("declined"))
		}
		c.end(ev, true)
		return nil
	}, framework.WithOrdering(framework.Ordering{Partitions: 2}))
	startWorker(t, w)
	for n := range 3 {
		e.enqueue(t, "order.dead", orderEvent{Key: "k", N: n}, framework.Ordered("k"))
	}
	// 0 succeeds, 1 is dead, 2 runs: the checker sees 0 then 2 and counts
	// a violation only if 2 started before 1 finished; mark 1 done.
	testutil.Wait(t, waitLong, "event 2 ran", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.running["k"] == 0 && c.next["k"] >= 1 && len(c.violations) > 0
	})
	c.mu.Lock()
	if len(c.violations) != 1 || c.violations[0] != "k/2 started before k/1 succeeded" {
		t.Fatalf("violations %v, want only event 2 after the dead event 1", c.violations)
	}
	c.mu.Unlock()
	dls, _, err := dlq.New(e.cl).List(t.Context(), dlq.Filter{Type: "order.dead"}, dlq.Page{})
	if err != nil || len(dls) != 1 {
		t.Fatalf("dead letters %v, %v", dls, err)
	}
	info, err := dlq.New(e.cl).Replay(t.Context(), dls[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	if info.Subject == "" || info.Subject[:len("jetflow.ord.order.dead.")] != "jetflow.ord.order.dead." {
		t.Fatalf("replayed to %q, want the key's slot subject", info.Subject)
	}
}

// The inspector shows a partition's head while its key is retrying.
func TestOrderingPartitionsShowRetryingHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	framework.Handle(w, "order.stuck", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
		return framework.RetryAfterErr(time.Hour, errors.New("gateway down"))
	}, framework.WithOrdering(framework.Ordering{Partitions: 2}))
	startWorker(t, w)
	info := e.enqueue(t, "order.stuck", orderEvent{Key: "order-9"}, framework.Ordered("order-9"))
	e.enqueue(t, "order.stuck", orderEvent{Key: "order-9", N: 1}, framework.Ordered("order-9"))
	var head *inspect.OrderingHead
	testutil.Wait(t, waitLong, "partition head shown as retrying", func() bool {
		parts, err := inspect.New(e.cl).OrderingPartitions(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != 2 {
			t.Fatalf("%d partitions, want 2", len(parts))
		}
		for _, p := range parts {
			if p.Head != nil {
				head = p.Head
				return p.Pending == 1
			}
		}
		return false
	})
	if head.TaskID != info.ID || head.Key != "order-9" {
		t.Fatalf("head %+v, want task %s of key order-9", head, info.ID)
	}
}

// With BlockOnDeadLetter a task that fails for good keeps its key blocked:
// the key's next task waits behind it until an operator retries it (it
// then runs again) or skips it (dead letter, the key moves on).
func TestOrderedBlockOnDeadLetter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := newOrderChecker(5)
	var mu sync.Mutex
	healthy := false
	runs := map[int]int{}
	w := e.worker(t)
	framework.Handle(w, "order.block", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
		c.start(ev)
		mu.Lock()
		runs[ev.N]++
		ok := healthy || ev.N != 1 && ev.N != 3
		mu.Unlock()
		c.end(ev, ok)
		if !ok {
			return errors.New("declined")
		}
		return nil
	}, framework.WithOrdering(framework.Ordering{Partitions: 1, BlockOnDeadLetter: true}), framework.WithMaxAttempts(2),
		framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Randomization: -1}))
	startWorker(t, w)
	ins := inspect.New(e.cl)
	var ids []string
	for n := range 5 {
		ids = append(ids, e.enqueue(t, "order.block", orderEvent{Key: "k", N: n}, framework.Ordered("k")).ID)
	}
	waitBlocked := func(id string) {
		t.Helper()
		testutil.Wait(t, waitLong, "task "+id+" blocked", func() bool {
			bs, err := ins.BlockedTasks(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			return len(bs) == 1 && bs[0].TaskID == id && bs[0].Key == "k" && bs[0].Error == "declined"
		})
	}
	waitBlocked(ids[1])
	// Event 1 is the partition's head; 2, 3 and 4 wait behind it.
	parts, err := ins.OrderingPartitions(t.Context())
	if err != nil || len(parts) != 1 || parts[0].Head == nil || parts[0].Head.TaskID != ids[1] || parts[0].Pending != 3 {
		t.Fatalf("partitions %+v, %v; want head %s with 3 waiting", parts, err, ids[1])
	}
	mu.Lock()
	healthy = true
	mu.Unlock()
	if err := ins.ResolveBlocked(t.Context(), "order.block", ids[1], inspect.ResolveRetry); err != nil {
		t.Fatal(err)
	}
	// Healthy now: 1 succeeds on its retry, then 2, 3 and 4 in order.
	c.wait(t)
	mu.Lock()
	if runs[2] != 1 || runs[1] != 3 {
		t.Fatalf("runs %v: want event 1 three times (two failures, one retry), event 2 once", runs)
	}
	healthy = false
	mu.Unlock()

	// Skip: the blocked task is dead-lettered and the key moves on.
	id := e.enqueue(t, "order.block", orderEvent{Key: "k", N: 3}, framework.Ordered("k")).ID
	waitBlocked(id)
	after := e.enqueue(t, "order.block", orderEvent{Key: "k", N: 5}, framework.Ordered("k")).ID
	if err := ins.ResolveBlocked(t.Context(), "order.block", id, inspect.ResolveSkip); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "the task after the skipped one ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs[5] == 1
	})
	dls, _, err := dlq.New(e.cl).List(t.Context(), dlq.Filter{Type: "order.block"}, dlq.Page{})
	if err != nil || len(dls) != 1 || dls[0].TaskID != id {
		t.Fatalf("dead letters %+v, %v; want the skipped task %s", dls, err, id)
	}
	if err := ins.ResolveBlocked(t.Context(), "order.block", after, inspect.ResolveRetry); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("resolving a task that is not blocked: %v", err)
	}
}

// Task IDs may hold ':' (workflow tasks' do), which KV keys may not: a
// blocked task with such an ID still gets its record, so that it is listed
// and can be resolved, instead of holding its key for good with nothing an
// operator can resolve.
func TestOrderedBlockOnDeadLetterIDOutsideKVKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	runs := map[int]int{}
	w := e.worker(t)
	framework.Handle(w, "order.blockid", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
		mu.Lock()
		runs[ev.N]++
		mu.Unlock()
		if ev.N == 0 {
			return errors.New("declined")
		}
		return nil
	}, framework.WithOrdering(framework.Ordering{Partitions: 1, BlockOnDeadLetter: true}), framework.WithMaxAttempts(1))
	startWorker(t, w)
	ins := inspect.New(e.cl)
	// Two IDs that one escaping of ':' must keep apart.
	other := e.enqueue(t, "order.blockid", orderEvent{Key: "j", N: 2}, framework.Ordered("j"), framework.WithID("run=3A1")).ID
	id := e.enqueue(t, "order.blockid", orderEvent{Key: "k", N: 0}, framework.Ordered("k"), framework.WithID("run:1")).ID
	e.enqueue(t, "order.blockid", orderEvent{Key: "k", N: 1}, framework.Ordered("k"))
	testutil.Wait(t, waitLong, "task "+id+" blocked", func() bool {
		bs, err := ins.BlockedTasks(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return len(bs) == 1 && bs[0].TaskID == id && bs[0].Key == "k" && bs[0].Error == "declined"
	})
	if err := ins.ResolveBlocked(t.Context(), "order.blockid", other, inspect.ResolveSkip); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("resolving %s, which is not blocked: %v", other, err)
	}
	if err := ins.ResolveBlocked(t.Context(), "order.blockid", id, inspect.ResolveSkip); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "the task after the skipped one ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs[1] == 1
	})
	dls, _, err := dlq.New(e.cl).List(t.Context(), dlq.Filter{Type: "order.blockid"}, dlq.Page{})
	if err != nil || len(dls) != 1 || dls[0].TaskID != id {
		t.Fatalf("dead letters %+v, %v; want the skipped task %s", dls, err, id)
	}
}

// A blocked record is a KV value anyone with access to the ordering bucket
// can write. One that the operator's list would skip as invalid (here: of
// another type) must not hold its task either, or the task's partition
// stays blocked with nothing listed to resolve: it is removed and the task
// runs.
func TestOrderedInvalidBlockedRecordDoesNotHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	runs := 0
	w := e.worker(t)
	framework.Handle(w, "order.forged", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
		mu.Lock()
		defer mu.Unlock()
		runs++
		if task.Attempt == 1 {
			return errors.New("try again")
		}
		return nil
	}, framework.WithOrdering(framework.Ordering{Partitions: 1, BlockOnDeadLetter: true}), framework.WithMaxAttempts(3),
		framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond, Randomization: -1}))
	startWorker(t, w)
	kv, err := e.js.KeyValue(t.Context(), e.cl.Names().OrderingBucket())
	if err != nil {
		t.Fatal(err)
	}
	for key, rec := range map[string]string{
		"order.forged.t1": `{"type":"other","id":"t1","key":"k","error":"forged"}`,
		"order.forged.t2": `{"type":"order.forged","id":"t2","key":"","error":"forged"}`,
	} {
		if _, err := kv.Put(t.Context(), key, []byte(rec)); err != nil {
			t.Fatal(err)
		}
	}
	e.enqueue(t, "order.forged", orderEvent{Key: "k", N: 1}, framework.Ordered("k"), framework.WithID("t1"))
	e.enqueue(t, "order.forged", orderEvent{Key: "k", N: 2}, framework.Ordered("k"), framework.WithID("t2"))
	testutil.Wait(t, waitLong, "both tasks ran on their second attempt", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs == 4
	})
	if bs, err := inspect.New(e.cl).BlockedTasks(t.Context()); err != nil || len(bs) != 0 {
		t.Fatalf("blocked tasks %+v, %v; want none", bs, err)
	}
}

// The ordering key header is the producer's to set on any task: on a task
// that did not come through an ordered subject it is no ordering key, and
// such a task that fails for good is dead-lettered as usual instead of
// blocking (held on the type's ordinary consumer, where enough of them
// would leave no room for the type's other tasks).
func TestOrderingHeaderOnPlainTaskDoesNotBlock(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	framework.Handle(w, "order.plain", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
		return framework.Permanent(errors.New("declined"))
	}, framework.WithOrdering(framework.Ordering{Partitions: 1, BlockOnDeadLetter: true}), framework.WithMaxAttempts(1))
	startWorker(t, w)
	msg := &nats.Msg{Subject: "jetflow.task.normal.order.plain", Data: []byte(`{"key":"k","n":1}`), Header: nats.Header{}}
	msg.Header.Set(jetstream.MsgIDHeader, "plain-1")
	msg.Header.Set(framework.HeaderOrderingKey, "k")
	// The delivery names the stored subject; a header claiming a slot
	// subject does not count.
	msg.Header.Set("Nats-Subject", "jetflow.ord.order.plain.0")
	if _, err := e.js.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "the task dead-lettered", func() bool {
		dls, _, err := dlq.New(e.cl).List(t.Context(), dlq.Filter{Type: "order.plain"}, dlq.Page{})
		if err != nil {
			t.Fatal(err)
		}
		return len(dls) == 1 && dls[0].TaskID == "plain-1"
	})
	if bs, err := inspect.New(e.cl).BlockedTasks(t.Context()); err != nil || len(bs) != 0 {
		t.Fatalf("blocked tasks %+v, %v; want none", bs, err)
	}
}
