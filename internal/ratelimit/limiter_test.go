package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

// newBucket starts a server and ensures the limits bucket on it.
func newBucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	_, js := testutil.JetStream(t, testutil.RunServer(t))
	kv, err := EnsureBucket(t.Context(), js, "LIMITS", "NO_TASK_STREAM")
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func limit(t *testing.T, l Limit) Limit {
	t.Helper()
	l, err := l.Normalize()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newLimiter(t *testing.T, kv jetstream.KeyValue, key string, l Limit) *Limiter {
	t.Helper()
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	return NewLimiter(key, limit(t, l), kv, quiet(), stop)
}

func stored(t *testing.T, kv jetstream.KeyValue, key string) Record {
	t.Helper()
	e, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var r Record
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Two processes sharing a limit reserve distinct permits: with a burst of
// 5 and a slow rate, 5 permits between them are due at once and the
// record counts 5, whoever took them.
func TestLimiterSharesBurst(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	l := Limit{Limit: 5, Interval: time.Hour, Burst: 5}
	a, b := newLimiter(t, kv, KeyType("a"), l), newLimiter(t, kv, KeyType("a"), l)
	if a.Limit().Burst != 5 {
		t.Fatalf("Limit() = %+v", a.Limit())
	}
	var wg sync.WaitGroup
	for i := range 5 {
		lim := a
		if i%2 == 1 {
			lim = b
		}
		wg.Go(func() {
			if err := lim.Wait(t.Context(), lim.Request()); err != nil {
				t.Errorf("Wait: %v", err)
			}
		})
	}
	wg.Wait()
	r := stored(t, kv, KeyType("a"))
	if r.Count+r.Prev != 5 || r.Limit != 5 || r.Burst != 5 || r.IntervalNS != int64(time.Hour) {
		t.Errorf("record %+v; want 5 permits counted and the limit", r)
	}
	// The next permit is an emission interval (12 minutes) away: a waiter
	// with a short context gives up and leaves the queue.
	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	p := a.Request()
	if err := a.Wait(ctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait past the burst: %v; want the context's deadline", err)
	}
	a.mu.Lock()
	queued := len(a.queue)
	a.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d permits queued after the waiter left; want 0", queued)
	}
}

// The gate lets a task through when its permit is due within the horizon,
// and sets it aside (keeping its permit) when it is not; Forget drops the
// permit.
func TestGateHoldsBeyondHorizon(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	lim := newLimiter(t, kv, KeyDep("pay"), Limit{Limit: 1, Interval: time.Minute})
	var g Gate
	if hold, err := g.Admit(t.Context(), lim, "task-1"); hold != 0 || err != nil {
		t.Fatalf("first task: hold %v, err %v; want go", hold, err)
	}
	// The next permit is a minute away, beyond the horizon (1 s): the task
	// is set aside for one to two horizons, its permit kept in the queue.
	h := lim.Limit().Horizon()
	hold, err := g.Admit(t.Context(), lim, "task-2")
	if err != nil || hold < h || hold >= 2*h {
		t.Fatalf("second task: hold %v, err %v; want within [%v, %v)", hold, err, h, 2*h)
	}
	if _, ok := g.held.Load("task-2"); !ok {
		t.Error("the held task's permit was not kept")
	}
	queued := func() int {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return len(lim.queue)
	}
	// Asked again, it keeps the same permit rather than queueing another.
	if hold, err := g.Admit(t.Context(), lim, "task-2"); err != nil || hold == 0 {
		t.Errorf("rerun: hold %v, err %v; want set aside again", hold, err)
	}
	if n := queued(); n != 1 {
		t.Errorf("%d permits queued; want 1", n)
	}
	g.Forget("task-2", map[string]*Limiter{"pay": lim})
	if _, ok := g.held.Load("task-2"); ok {
		t.Error("Forget kept the permit")
	}
	if n := queued(); n != 0 {
		t.Errorf("%d permits queued after Forget; want 0", n)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := g.Admit(ctx, lim, "task-3"); !errors.Is(err, context.Canceled) {
		t.Errorf("Admit with an ended context: %v", err)
	}
}

// Throttle pushes every process's next permit past the pause: this
// process's granted permits, and the shared record another process reads.
func TestThrottle(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	l := Limit{Limit: 100, Interval: time.Second}
	a, b := newLimiter(t, kv, KeyType("a"), l), newLimiter(t, kv, KeyType("a"), l)
	p := a.Request()
	<-p.ready
	before := time.Now()
	if err := a.Throttle(time.Minute); err != nil {
		t.Fatal(err)
	}
	if due := a.Due(p); due.Before(before.Add(59 * time.Second)) {
		t.Errorf("granted permit due %v after a one-minute throttle", time.Until(due))
	}
	r := stored(t, kv, KeyType("a"))
	if time.Unix(0, r.ThrottledUntil).Before(before.Add(59*time.Second)) || time.Unix(0, r.TAT).Before(before.Add(59*time.Second)) {
		t.Errorf("record %+v not throttled", r)
	}
	// A shorter throttle changes nothing.
	rev := revision(t, kv, KeyType("a"))
	if err := a.Throttle(time.Second); err != nil {
		t.Fatal(err)
	}
	if got := revision(t, kv, KeyType("a")); got != rev {
		t.Errorf("a shorter throttle rewrote the record (revision %d → %d)", rev, got)
	}
	// The other process finds nothing within its horizon.
	dues, next, err := b.reserve(1)
	if err != nil || len(dues) != 0 || next.Before(before.Add(58*time.Second)) {
		t.Errorf("reserve after the throttle: %v due, next in %v, err %v", len(dues), time.Until(next), err)
	}
}

func revision(t *testing.T, kv jetstream.KeyValue, key string) uint64 {
	t.Helper()
	e, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	return e.Revision()
}

// A record that is not JSON, or one whose times are far in the future
// (which would stop the limit for good), is replaced by a fresh one; so is
// a deleted key.
func TestLimiterRecoversFromBadRecord(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	far, err := json.Marshal(Record{TAT: time.Now().Add(100 * 24 * time.Hour).UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	for i, bad := range [][]byte{[]byte("{not json"), far, []byte(`{"count":-4}`), nil} {
		key := KeyType("bad" + string(rune('a'+i)))
		if bad == nil {
			if _, err := kv.Put(t.Context(), key, []byte("{}")); err != nil {
				t.Fatal(err)
			}
			if err := kv.Delete(t.Context(), key); err != nil {
				t.Fatal(err)
			}
		} else if _, err := kv.Put(t.Context(), key, bad); err != nil {
			t.Fatal(err)
		}
		lim := newLimiter(t, kv, key, Limit{Limit: 10})
		dues, _, err := lim.reserve(1)
		if err != nil || len(dues) != 1 || time.Until(dues[0]) > time.Second {
			t.Errorf("over %q: %d permits, err %v; want one now", bad, len(dues), err)
		}
	}
}

// A limiter whose worker stops abandons its reservations: a waiter sees
// its own context end, not a hang.
func TestLimiterStops(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	stop := make(chan struct{})
	lim := NewLimiter(KeyType("a"), limit(t, Limit{Limit: 1, Interval: time.Hour}), kv, quiet(), stop)
	if err := lim.Wait(t.Context(), lim.Request()); err != nil {
		t.Fatal(err)
	}
	p := lim.Request() // not within the horizon: the reserving goroutine sleeps
	close(stop)
	testutil.Wait(t, 10*time.Second, "the reserving goroutine to end", func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		return !lim.running
	})
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := lim.Wait(ctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Wait after stop: %v", err)
	}
}

// List reads valid limits, skipping keys the caller refuses and records
// that are not valid; a missing bucket lists nothing.
func TestList(t *testing.T) {
	t.Parallel()
	js, kv := newBucket(t)
	lim := newLimiter(t, kv, KeyType("good"), Limit{Limit: 10})
	if err := lim.Wait(t.Context(), lim.Request()); err != nil {
		t.Fatal(err)
	}
	if err := lim.Throttle(time.Second); err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		KeyType("garbage"): "{not json",
		KeyType("zero"):    `{"limit":0}`,
		KeyType("far"):     `{"limit":1,"interval_ns":1000000000,"burst":1,"tat":9000000000000000000}`,
		"unknown.key":      `{"limit":1,"interval_ns":1000000000,"burst":1}`,
	} {
		if _, err := kv.Put(t.Context(), k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	infos, err := List(t.Context(), js, "LIMITS", func(k string) bool { return k != "unknown.key" })
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].Key != KeyType("good") || infos[0].Limit.Limit != 10 || infos[0].ThrottledUntil.IsZero() {
		t.Fatalf("List = %+v; want the good limit, throttled", infos)
	}
	if infos, err := List(t.Context(), js, "NO_SUCH_BUCKET", func(string) bool { return true }); infos != nil || err != nil {
		t.Errorf("List of a missing bucket = %v, %v", infos, err)
	}
}

func TestSleepUntil(t *testing.T) {
	t.Parallel()
	if err := SleepUntil(t.Context(), time.Now().Add(-time.Hour)); err != nil {
		t.Errorf("past time: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := SleepUntil(ctx, time.Now().Add(time.Hour)); !errors.Is(err, context.Canceled) {
		t.Errorf("ended context: %v", err)
	}
}
