package framework_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
)

// Three workers share four lanes: each key's tasks run one at a time in
// enqueue order, a task that fails waits for its retry with the key's later
// tasks behind it, and the keys of one lane run at the same time (what
// partitions cannot do).
func TestLanesRunKeysInOrderAndInParallel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const keys, events = 40, 5
	c := newOrderChecker(keys * events)
	var failMu sync.Mutex
	failed := map[string]bool{}
	var running, most atomic.Int64
	for range 3 {
		w := e.worker(t, framework.WithConcurrency(16))
		framework.Handle(w, "lane.event", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
			c.start(ev)
			n := running.Add(1)
			defer running.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
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
			case <-time.After(2 * time.Millisecond):
			case <-ctx.Done():
			}
			c.end(ev, true)
			return nil
		}, framework.WithOrdering(framework.Ordering{Lanes: 4}))
		startWorker(t, w)
	}
	for n := range events {
		for k := range keys {
			key := fmt.Sprintf("lane-%d", 10+k*7) // lengths 7 and 8: half the keys fail once
			e.enqueue(t, "lane.event", orderEvent{Key: key, N: n}, framework.Ordered(key))
		}
	}
	c.wait(t)
	// Four lanes with MaxAckPending 1 each (partitions) would run four at
	// most.
	if m := most.Load(); m <= 4 {
		t.Fatalf("at most %d tasks ran at once over 4 lanes, want more", m)
	}
}

// A worker that dies holding a key's head task (its connection is cut, its
// handler never returns) loses its lane to another worker, which runs
// nothing of the lane until the head came back to it after its ack wait:
// then the head, then the key's later tasks, in order.
func TestLaneHeadSurvivesOwnerDeath(t *testing.T) {
	t.Parallel()
	headSurvivesWorkerDeath(t, "lane.kill", framework.Ordering{Lanes: 1}, 2*time.Second)
}

// A server restart (same store) in the middle of a run loses no task and
// keeps every key in order.
func TestLanesSurviveServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testutil.WithListen())
	const keys, events = 10, 6
	c := newOrderChecker(keys * events)
	gate := make(chan struct{})
	var once sync.Once
	for range 2 {
		w := e.worker(t, framework.WithConcurrency(4))
		framework.Handle(w, "lane.restart", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
			c.start(ev)
			if ev.N == 2 {
				once.Do(func() { close(gate) })
			}
			c.end(ev, true)
			return nil
		}, framework.WithOrdering(framework.Ordering{Lanes: 4}), framework.WithAckWait(2*time.Second))
		startWorker(t, w)
	}
	for n := range events {
		for k := range keys {
			key := fmt.Sprintf("key-%d", k)
			e.enqueue(t, "lane.restart", orderEvent{Key: key, N: n}, framework.Ordered(key))
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

// Lanes refuse what they cannot serve, when the type is registered.
func TestLanesOptionRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, o := range map[string]framework.Ordering{
		"not a power of two":  {Lanes: 3},
		"too many":            {Lanes: 512},
		"negative":            {Lanes: -1},
		"with partitions":     {Lanes: 4, Partitions: 4},
		"blocking with caps":  {Lanes: 4, PerKey: 2, BlockOnDeadLetter: true},
		"blocking with limit": {Lanes: 4, BlockOnDeadLetter: true, Limit: func(string) int { return 1 }},
		"negative per key":    {Lanes: 4, PerKey: -1},
		"per key alone":       {Partitions: 4, PerKey: 2},
		"limit alone":         {Limit: func(string) int { return 2 }},
	} {
		t.Run(name, func(t *testing.T) {
			w := e.worker(t)
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "invalid option") {
					t.Errorf("panic %v, want an invalid option", r)
				}
			}()
			w.HandleFunc("lane.bad", func(context.Context, *framework.Task) error { return nil }, framework.WithOrdering(o))
		})
	}
}

// With PerKey 2, three workers run at most two tasks of a key at once
// across the cluster, and do run two at once; a key's Limit raises its own
// cap, read as tasks start. The whole backlog waits before the workers
// start: without the cap every task of a key could run at once.
func TestLanesCapPerKeyAcrossWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const keys, events = 12, 12
	var mu sync.Mutex
	running, most := map[string]int{}, map[string]int{}
	var done atomic.Int64
	finished := make(chan struct{})
	limit := func(key string) int {
		if key == "vip" {
			return 4
		}
		return 0 // PerKey
	}
	// The backlog first, so that a key's tasks could all run at once.
	for n := range events {
		for k := range keys + 1 {
			key := fmt.Sprintf("key-%d", k)
			if k == keys {
				key = "vip"
			}
			e.enqueue(t, "lane.cap", orderEvent{Key: key, N: n}, framework.Ordered(key))
		}
	}
	for range 3 {
		w := e.worker(t, framework.WithConcurrency(16))
		framework.Handle(w, "lane.cap", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
			mu.Lock()
			running[ev.Key]++
			most[ev.Key] = max(most[ev.Key], running[ev.Key])
			mu.Unlock()
			select { // long enough for the key's next tasks to be offered meanwhile
			case <-time.After(20 * time.Millisecond):
			case <-ctx.Done():
			}
			mu.Lock()
			running[ev.Key]--
			mu.Unlock()
			if done.Add(1) == (keys+1)*events {
				close(finished)
			}
			return nil
		}, framework.WithOrdering(framework.Ordering{Lanes: 4, PerKey: 2, Limit: limit}))
		startWorker(t, w)
	}
	testutil.Recv(t, finished, waitLong, "every capped task")
	mu.Lock()
	defer mu.Unlock()
	reached := 0
	for key, m := range most {
		want := 2
		if key == "vip" {
			want = 4
		}
		if m > want {
			t.Errorf("%s: %d running at once, cap %d", key, m, want)
		}
		if m == want {
			reached++
		}
	}
	if most["vip"] != 4 || reached < 2 {
		t.Errorf("caps never reached: vip %d, keys at their cap %d (most %v)", most["vip"], reached, most)
	}
}

// The lanes of a type spread over its workers: each pulls the lanes the
// registry gives it (rendezvous hashing), so every worker runs some of the
// type's tasks, including one that started after the others had taken
// every lane.
func TestLanesSpreadOverWorkers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	fast := framework.WithTimings(framework.Timings{RegistryInterval: framework.MinRegistryInterval})
	var ran [3]atomic.Int64
	start := func(i int) {
		w := e.worker(t, fast, framework.WithConcurrency(8))
		framework.Handle(w, "lane.spread", func(ctx context.Context, task *framework.Task, ev orderEvent) error {
			ran[i].Add(1)
			return nil
		}, framework.WithOrdering(framework.Ordering{Lanes: 8}))
		startWorker(t, w)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	produced := make(chan struct{})
	go func() { // tasks over many keys, until every worker ran some
		defer close(produced)
		for n := 0; ctx.Err() == nil; n++ {
			key := fmt.Sprintf("spread-%d", n%64)
			if _, err := e.cl.Enqueue(ctx, "lane.spread", orderEvent{Key: key, N: n}, framework.Ordered(key)); err != nil && ctx.Err() == nil {
				t.Errorf("enqueue: %v", err)
				return
			}
			if n%64 == 63 {
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond): // a steady stream, not a flood
				}
			}
		}
	}()
	start(0)
	testutil.Wait(t, waitLong, "the first worker running lane tasks", func() bool { return ran[0].Load() > 0 })
	start(1)
	start(2)
	testutil.Wait(t, 3*waitLong, "every worker running lane tasks", func() bool {
		return ran[1].Load() > 0 && ran[2].Load() > 0
	})
	cancel()
	<-produced
}

// With BlockOnDeadLetter, a task that fails for good blocks its key only:
// the lane's other keys go on. When a second worker joins and a lane moves
// to it, the former owner hands back the blocked tasks it held (at their
// next recheck), so that the lane's new owner starts: they block there
// again, and the lane's other keys go on. Skipping the blocked tasks lets
// their keys move on, in order.
func TestLanesBlockOnDeadLetterBlocksOnlyItsKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const typ, bad, good = "lane.block", 8, 16
	var mu sync.Mutex
	done := map[string][]int{} // key → the N of its successes, in order
	count := func(prefix string, n int) int {
		mu.Lock()
		defer mu.Unlock()
		c := 0
		for k, ns := range done {
			if strings.HasPrefix(k, prefix) && slices.Contains(ns, n) {
				c++
			}
		}
		return c
	}
	start := func(id string) {
		w := e.worker(t, framework.WithWorkerID(id), framework.WithConcurrency(8),
			framework.WithTimings(framework.Timings{RegistryInterval: framework.MinRegistryInterval}))
		framework.Handle(w, typ, func(ctx context.Context, task *framework.Task, ev orderEvent) error {
			if strings.HasPrefix(ev.Key, "bad") && ev.N == 0 {
				return errors.New("ledger refused")
			}
			mu.Lock()
			done[ev.Key] = append(done[ev.Key], ev.N)
			mu.Unlock()
			return nil
		}, framework.WithOrdering(framework.Ordering{Lanes: 2, BlockOnDeadLetter: true}), framework.WithMaxAttempts(1))
		startWorker(t, w)
	}
	start("w1")
	for k := range bad {
		key := fmt.Sprintf("bad-%d", k)
		e.enqueue(t, typ, orderEvent{Key: key, N: 0}, framework.Ordered(key))
		e.enqueue(t, typ, orderEvent{Key: key, N: 1}, framework.Ordered(key))
	}
	for n := range 3 {
		for k := range good {
			key := fmt.Sprintf("good-%d", k)
			e.enqueue(t, typ, orderEvent{Key: key, N: n}, framework.Ordered(key))
		}
	}
	op := inspect.New(e.cl)
	testutil.Wait(t, waitLong, "every bad key blocked, every good task done", func() bool {
		bs, err := op.BlockedTasks(t.Context())
		return err == nil && len(bs) == bad && count("good", 2) == good
	})
	if n := count("bad", 1); n != 0 {
		t.Fatalf("%d tasks ran behind their blocked key", n)
	}
	ls, err := op.Lanes(t.Context())
	if err != nil || len(ls) != 2 || ls[0].Delivered == 0 || ls[1].Delivered == 0 {
		t.Fatalf("lanes %+v, %v: want blocked tasks held in both", ls, err)
	}

	start("w2")
	testutil.Wait(t, waitLong, "a lane moved to w2", func() bool {
		ls, err := op.Lanes(t.Context())
		return err == nil && len(ls) == 2 && ls[0].Owner != "" && ls[1].Owner != "" && ls[0].Owner != ls[1].Owner
	})
	for k := range good {
		key := fmt.Sprintf("good-%d", k)
		e.enqueue(t, typ, orderEvent{Key: key, N: 3}, framework.Ordered(key))
	}
	testutil.Wait(t, waitLong, "the good keys' tasks done on both lanes", func() bool { return count("good", 3) == good })
	if n := count("bad", 1); n != 0 {
		t.Fatalf("%d tasks ran behind their blocked key after the move", n)
	}

	bs, err := op.BlockedTasks(t.Context())
	if err != nil || len(bs) != bad {
		t.Fatalf("blocked %+v, %v", bs, err)
	}
	for _, b := range bs {
		if err := op.ResolveBlocked(t.Context(), typ, b.TaskID, inspect.ResolveSkip); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Wait(t, waitLong, "the blocked keys moved on", func() bool { return count("bad", 1) == bad })
	mu.Lock()
	defer mu.Unlock()
	for key, ns := range done {
		want := []int{0, 1, 2, 3}
		if strings.HasPrefix(key, "bad") {
			want = []int{1}
		}
		if !slices.Equal(ns, want) {
			t.Errorf("%s ran %v, want %v", key, ns, want)
		}
	}
}
