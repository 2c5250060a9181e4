package keylimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLong bounds every wait of the tests: generous, so that busy machines
// do not cause flakes; a correct run never gets near it.
const waitLong = 30 * time.Second

// gauge counts the tasks of each key running at once, in every worker of
// the test, and keeps the highest count seen per key.
type gauge struct {
	mu       sync.Mutex
	running  map[string]int
	most     map[string]int
	attempts map[int]int
}

func newGauge() *gauge {
	return &gauge{running: map[string]int{}, most: map[string]int{}, attempts: map[int]int{}}
}

func (g *gauge) enter(key string, attempt int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]++
	g.most[key] = max(g.most[key], g.running[key])
	g.attempts[attempt]++
}

func (g *gauge) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]--
}

func (g *gauge) reset() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.most = map[string]int{}
}

func (g *gauge) peak(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.most[key]
}

// Three workers on their own connections, eight slots each, run 20 tasks
// of each of 10 keys with a limit of 2 per key: no key ever has more than
// two running at once, every key reaches two, and waiting spent no attempt.
func TestPerKeyLimitHoldsAcrossWorkers(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const (
		typ     = "acct.sync"
		keys    = 10
		perKey  = 20
		limit   = 2
		workers = 3
	)
	g := newGauge()
	done := make(chan struct{}, keys*perKey)
	for range workers {
		w := e.Worker(t, framework.WithConcurrency(8))
		keylimit.Install(w)
		w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
			g.enter(task.Key(), task.Attempt)
			defer g.leave(task.Key())
			// The work: a short call, so that tasks of a key overlap.
			select {
			case <-time.After(3 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			done <- struct{}{}
			return nil
		}, keylimit.PerKey(limit))
		testutil.StartWorker(t, w)
	}
	var specs []framework.TaskSpec
	for i := range perKey {
		for k := range keys {
			specs = append(specs, framework.TaskSpec{Type: typ, Payload: i, Options: []framework.EnqueueOption{framework.WithKey(fmt.Sprintf("tenant-%d", k))}})
		}
	}
	if _, err := e.Client.EnqueueMany(t.Context(), specs); err != nil {
		t.Fatal(err)
	}
	for i := range keys * perKey {
		testutil.Recv(t, done, waitLong, fmt.Sprintf("task %d of %d", i+1, keys*perKey))
	}
	reached := 0
	for k := range keys {
		key := fmt.Sprintf("tenant-%d", k)
		switch p := g.peak(key); {
		case p > limit:
			t.Errorf("key %s: %d running at once, limit %d", key, p, limit)
		case p == limit:
			reached++
		}
	}
	if reached == 0 {
		t.Errorf("no key reached its limit of %d: the test shows nothing", limit)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.attempts) != 1 || g.attempts[1] != keys*perKey {
		t.Errorf("attempts %v, want every task on its first", g.attempts)
	}
}

// A limit set at run time applies without a restart: with PerKey(1), the
// key "vip" gets 3 through keylimit.Set, and three of its tasks run at
// once (each waits for the other two), while "std" keeps one at a time.
// Removing the override brings "vip" back to 1.
func TestOverrideAtRunTime(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const typ = "acct.export"
	g := newGauge()
	var mu sync.Mutex
	arrived := map[string]int{}
	release := make(chan struct{})
	done := make(chan string, 16)
	w := e.Worker(t, framework.WithConcurrency(8))
	keylimit.Install(w)
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		key := task.Key()
		g.enter(key, task.Attempt)
		defer g.leave(key)
		mu.Lock()
		arrived[key]++
		mu.Unlock()
		if key == "vip" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done <- key
		return nil
	}, keylimit.PerKey(1))
	testutil.StartWorker(t, w)
	if err := keylimit.Set(t.Context(), e.Client, typ, "vip", 3); err != nil {
		t.Fatal(err)
	}
	u, err := keylimit.List(t.Context(), e.Client)
	if err != nil || len(u.Overrides) != 1 || u.Overrides[0].Key != "vip" || u.Overrides[0].Limit != 3 {
		t.Fatalf("List: %+v, %v", u, err)
	}
	for range 3 {
		e.Enqueue(t, typ, "x", framework.WithKey("vip"))
		e.Enqueue(t, typ, "x", framework.WithKey("std"))
	}
	testutil.Wait(t, waitLong, "three vip tasks running at once", func() bool { return g.peak("vip") == 3 })
	u, err = keylimit.List(t.Context(), e.Client)
	if err != nil || len(u.Running) == 0 || u.Running[len(u.Running)-1].Key != "vip" || u.Running[len(u.Running)-1].Tasks != 3 {
		t.Errorf("List while vip runs: %+v, %v", u, err)
	}
	close(release)
	for range 6 {
		testutil.Recv(t, done, waitLong, "a task done")
	}
	if p := g.peak("std"); p != 1 {
		t.Errorf("std: %d running at once, limit 1", p)
	}

	if err := keylimit.Remove(t.Context(), e.Client, typ, "vip"); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "the override gone", func() bool {
		u, err := keylimit.List(t.Context(), e.Client)
		return err == nil && len(u.Overrides) == 0
	})
	// The worker reads the overrides from a watch: once the removal
	// reached it, vip tasks run one at a time again.
	testutil.Wait(t, waitLong, "the worker sees the removal", func() bool {
		v, _ := w.Plugin("key limits")
		return v != nil && keylimit.LimitOf(v, typ, "vip") == 1
	})
	g.reset()
	for range 4 {
		e.Enqueue(t, typ, "x", framework.WithKey("vip"))
	}
	for range 4 {
		testutil.Recv(t, done, waitLong, "a vip task done")
	}
	if p := g.peak("vip"); p != 1 {
		t.Errorf("vip after the removal: %d running at once, limit 1", p)
	}
}

// A worker that dies holding a slot gives it back when the slot's TTL (the
// type's ack wait) passes: with limit 1, a worker takes a task of key "k"
// and loses its connection for good while the handler runs; another
// worker then runs that task (redelivered after the ack wait) and the
// next one of the key.
func TestDeadWorkerGivesItsSlotBack(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const (
		typ     = "acct.slow"
		ackWait = 2 * time.Second
	)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	took := make(chan string, 1)
	dead := e.Worker(t)
	keylimit.Install(dead)
	dead.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		took <- task.ID
		<-stuck
		return nil
	}, keylimit.PerKey(1), framework.WithAckWait(ackWait))
	testutil.StartWorker(t, dead)
	first := e.Enqueue(t, typ, "x", framework.WithKey("k"))
	if id := testutil.Recv(t, took, waitLong, "the first task taken"); id != first.ID {
		t.Fatalf("took %s", id)
	}
	// The dying worker's connection closes: no heartbeat, no renewal.
	dead.Conn().Close()
	lost := time.Now()

	ran := make(chan string, 4)
	w := e.Worker(t)
	keylimit.Install(w)
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		ran <- task.ID
		return nil
	}, keylimit.PerKey(1), framework.WithAckWait(ackWait))
	testutil.StartWorker(t, w)
	second := e.Enqueue(t, typ, "x", framework.WithKey("k"))
	got := map[string]bool{}
	for range 2 {
		got[testutil.Recv(t, ran, waitLong, "a task of k on the live worker")] = true
	}
	if !got[first.ID] || !got[second.ID] {
		t.Errorf("ran %v, want %s and %s", got, first.ID, second.ID)
	}
	t.Logf("both ran %v after the dead worker lost its connection (slot TTL %v)", time.Since(lost).Round(10*time.Millisecond), ackWait)
}

// A key from the wire that is not a valid key fails the task as invalid;
// bad input from callers gets a clear error.
func TestBadKeys(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const typ = "acct.bad"
	w := e.Worker(t)
	keylimit.Install(w)
	w.HandleFunc(typ, func(context.Context, *framework.Task) error { return nil }, keylimit.PerKey(1))
	testutil.StartWorker(t, w)
	m := &nats.Msg{Subject: "jetflow.task.normal." + typ, Data: []byte("{}"), Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, "bad-key-1")
	m.Header.Set(framework.HeaderKey, "a\x01b")
	if _, err := e.JS.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	var recs []dlq.Record
	testutil.Wait(t, waitLong, "the task dead-lettered", func() bool {
		var err error
		recs, _, err = dlq.New(e.Client).List(t.Context(), dlq.Filter{}, dlq.Page{})
		return err == nil && len(recs) == 1
	})
	if r := recs[0]; r.Reason != dlq.ReasonInvalid || !strings.Contains(r.LastError, framework.HeaderKey) {
		t.Errorf("dead letter %+v", r)
	}

	for _, k := range []string{"", strings.Repeat("k", framework.MaxKeyLen+1), "a\nb", "\xff", " padded "} {
		if _, err := e.Client.Enqueue(t.Context(), typ, "x", framework.WithKey(k)); !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("WithKey(%q): %v", k, err)
		}
	}
	for _, n := range []int{0, -1, keylimit.MaxLimit + 1} {
		if err := keylimit.Set(t.Context(), e.Client, typ, "k", n); !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("Set limit %d: %v", n, err)
		}
	}
	if err := keylimit.Set(t.Context(), e.Client, "Bad Type", "k", 1); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("Set on an invalid type: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil {
				t.Error("PerKey(0) registered")
			}
		}()
		e.Worker(t).HandleFunc("acct.zero", func(context.Context, *framework.Task) error { return nil }, keylimit.PerKey(0))
	}()
}

// A task that runs for several slot TTLs keeps its slot: its worker renews
// it, so the next task of the key starts only once the first returned.
func TestLongTaskKeepsItsSlot(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const (
		typ     = "acct.long"
		ackWait = time.Second // the slot's TTL
	)
	g := newGauge()
	release := make(chan struct{})
	started := make(chan string, 2)
	w := e.Worker(t, framework.WithConcurrency(4))
	keylimit.Install(w)
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		g.enter(task.Key(), task.Attempt)
		defer g.leave(task.Key())
		started <- task.ID
		select {
		case <-release:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}, keylimit.PerKey(1), framework.WithAckWait(ackWait))
	testutil.StartWorker(t, w)
	first := e.Enqueue(t, typ, "x", framework.WithKey("k"))
	if id := testutil.Recv(t, started, waitLong, "the first task"); id != first.ID {
		t.Fatalf("started %s", id)
	}
	e.Enqueue(t, typ, "x", framework.WithKey("k"))
	// Four TTLs: without renewals the slot would have expired three times.
	select {
	case id := <-started:
		t.Fatalf("task %s started while the first one held the key's only slot", id)
	case <-time.After(4 * ackWait):
	}
	close(release)
	testutil.Recv(t, started, waitLong, "the second task, after the first")
	if p := g.peak("k"); p != 1 {
		t.Errorf("%d running at once, limit 1", p)
	}
}
