package lanes

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/testutil"
)

// The runner against an embedded server: a lane consumer of its own per
// test, tasks published on ordered subjects with their key, and a fake
// worker (fakeworker_test.go) that runs and settles them.

const (
	longAckWait = 30 * time.Second // a redelivery by ack wait would time a test out
	settleWait  = 20 * time.Second // generous bound for anything a test waits for
)

// Many keys through one runner: each key's tasks start in publish order,
// one at a time, while several keys run at once. Tasks without a key keep
// the order of their slot.
func TestRunnerOrdersEachKeyAndRunsKeysInParallel(t *testing.T) {
	t.Parallel()
	const keys, perKey, keyless = 16, 6, 4
	e := newLaneEnv(t, longAckWait, 2*time.Second)
	var want []string
	for i := range perKey {
		for k := range keys {
			id := fmt.Sprintf("k%02d/%d", k, i)
			e.publish(fmt.Sprintf("k%02d", k), id)
			want = append(want, id)
		}
		if i < keyless {
			id := fmt.Sprintf("none/%d", i)
			e.publish("", id)
			want = append(want, id)
		}
	}
	f := newFake(e, 0, func(*ptask) time.Duration {
		<-time.After(time.Millisecond) // the task's work: keys overlap
		return 0
	})
	cfg := f.config(e)
	loops := &liveness.Loops{}
	cfg.Loop = loops.Loop("lane")
	f.start(cfg)
	f.waitFor(settleWait, "ack", want...)

	f.checkRan()
	starts := f.events("start")
	if len(starts) != len(want) {
		t.Errorf("%d starts for %d tasks", len(starts), len(want))
	}
	last := map[string]int{}
	for _, ev := range starts {
		key, n, _ := strings.Cut(ev.id, "/")
		i, _ := strconv.Atoi(n)
		if prev, ok := last[key]; (ok && i != prev+1) || (!ok && i != 0) || ev.n != 1 {
			t.Errorf("%s (delivery %d) starts after %s/%d", ev.id, ev.n, key, prev)
		}
		last[key] = i
	}
	f.mu.Lock()
	maxAct := f.maxAct
	f.mu.Unlock()
	if maxAct < 2 {
		t.Errorf("at most %d task ran at once: keys did not run in parallel", maxAct)
	}
	if held := f.r.Gate().Held(); held != 0 {
		t.Errorf("the gate holds %d deliveries after all settled", held)
	}
	if cfg.Loop.Busy() {
		t.Error("the loop's record says busy")
	}
	testutil.Wait(t, settleWait, "the stream empties", func() bool { return e.stored() == 0 })
}

// A task that fails and is retried holds its key's later tasks until it
// comes back and succeeds; the other keys go on meanwhile.
func TestRunnerRetryHoldsItsKey(t *testing.T) {
	t.Parallel()
	e := newLaneEnv(t, longAckWait, 2*time.Second)
	for i := 1; i <= 3; i++ {
		e.publish("a", fmt.Sprintf("a/%d", i))
		e.publish("b", fmt.Sprintf("b/%d", i))
	}
	f := newFake(e, 0, func(p *ptask) time.Duration {
		if p.id == "a/1" && p.n == 1 {
			return time.Second
		}
		return 0
	})
	f.start(f.config(e))
	f.waitFor(settleWait, "ack", "a/1", "a/2", "a/3", "b/1", "b/2", "b/3")

	f.checkRan()
	var a []string
	for _, ev := range f.events("start") {
		if ev.id[0] == 'a' {
			a = append(a, fmt.Sprintf("%s#%d", ev.id, ev.n))
		}
	}
	if want := []string{"a/1#1", "a/1#2", "a/2#1", "a/3#1"}; !slices.Equal(a, want) {
		t.Errorf("key a started %v, want %v", a, want)
	}
	retried := slices.IndexFunc(f.events(""), func(ev event) bool { return ev.kind == "start" && ev.id == "a/1" && ev.n == 2 })
	for _, id := range []string{"b/1", "b/2", "b/3"} {
		if i := f.index("ack", id); i > retried {
			t.Errorf("%s settled after a/1 came back: key b waited for key a", id)
		}
	}
}

// The lane moves to a second runner when the first one's connection is
// cut while it runs the head of key k. The second starts nothing of the
// lane until the deliveries still pending for the first came back to it
// (after their ack wait), and then k's head before k's later tasks.
func TestRunnerFailoverWaitsForTheFormerOwnersTasks(t *testing.T) {
	t.Parallel()
	e := newLaneEnv(t, 2*time.Second, time.Second)
	for i := 1; i <= 3; i++ {
		e.publish("k", fmt.Sprintf("k/%d", i))
	}
	e.publish("o", "o/1")
	var first *fake
	first = newFake(e, 0, func(p *ptask) time.Duration {
		if p.id == "k/1" {
			first.hold(nil) // its owner dies running it
		}
		return 0
	})
	first.start(first.config(e))
	first.waitFor(settleWait, "start", "k/1")
	first.waitFor(settleWait, "ack", "o/1")
	testutil.Wait(t, settleWait, "k/2 and k/3 queued behind k/1", func() bool { return len(first.r.Gate().Queued()) == 2 })

	second := newFake(e, 0, func(*ptask) time.Duration { return 0 })
	second.start(second.config(e))
	first.nc.Close()
	e.publish("o", "o/2")
	second.waitFor(settleWait, "ack", "k/1", "k/2", "k/3", "o/2")

	second.checkRan()
	back := second.index("recv", "k/1")
	if ev := second.events("")[back]; ev.n < 2 {
		t.Errorf("k/1 reached the second runner as delivery %d", ev.n)
	}
	if i := slices.IndexFunc(second.events(""), func(ev event) bool { return ev.kind == "offer" }); i < back {
		t.Errorf("the second runner started %s before k/1 came back to it: %v", second.events("")[i].id, second.events(""))
	}
	if i := second.index("recv", "o/2"); i > back {
		t.Logf("o/2 reached the second runner after k/1: the closed gate held nothing")
	}
	var k []string
	for _, id := range second.ids("start") {
		if id[0] == 'k' {
			k = append(k, id)
		}
	}
	if want := []string{"k/1", "k/2", "k/3"}; !slices.Equal(k, want) {
		t.Errorf("key k started %v on the second runner, want %v", k, want)
	}
	if second.has("recv", "o/1") {
		t.Error("o/1, settled by the first runner, reached the second")
	}
}

// A runner whose pin is taken away (unpinned by an administrator) while
// it runs k's head hands back k's queued tasks, and runs them again in
// order once it holds the lane anew and its check found no other owner.
func TestRunnerLosesAndRegainsThePin(t *testing.T) {
	t.Parallel()
	e := newLaneEnv(t, longAckWait, 2*time.Second)
	for i := 1; i <= 3; i++ {
		e.publish("k", fmt.Sprintf("k/%d", i))
	}
	release := make(chan struct{})
	var f *fake
	f = newFake(e, 0, func(p *ptask) time.Duration {
		if p.id == "k/1" {
			f.hold(release)
		}
		return 0
	})
	f.start(f.config(e))
	f.waitFor(settleWait, "start", "k/1")
	testutil.Wait(t, settleWait, "k/2 and k/3 queued behind k/1", func() bool { return len(f.r.Gate().Queued()) == 2 })
	first := f.r.Status()
	if first.Pin == "" || !first.Open || first.Running != 1 || first.Queued != 2 || first.Keys != 1 || first.Awaited != 0 {
		t.Errorf("status with k/1 running and two queued: %+v", first)
	}
	s, err := e.js.Stream(t.Context(), e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UnpinConsumer(t.Context(), e.cons.CachedInfo().Name, topology.LaneGroup); err != nil {
		t.Fatal(err)
	}
	e.publish("o", "o/1") // finds the runner's request with the old pin
	f.waitFor(settleWait, "back", "k/2", "k/3")
	f.waitFor(settleWait, "ack", "o/1")
	if st := f.r.Status(); st.Pin == "" || st.Pin == first.Pin {
		t.Errorf("status once pinned again: %+v (first pin %s)", st, first.Pin)
	}
	close(release)
	f.waitFor(settleWait, "ack", "k/1", "k/2", "k/3")

	f.checkRan()
	if got := slices.DeleteFunc(f.ids("start"), func(id string) bool { return id[0] != 'k' }); !slices.Equal(got, []string{"k/1", "k/2", "k/3"}) {
		t.Errorf("key k started %v", got)
	}
	if f.index("offer", "o/1") < f.index("back", "k/3") {
		t.Error("o/1 started before the lost pin's tasks were handed back")
	}
}

// A key's head runs for three ack waits while its later tasks wait behind
// it: the runner beats them, so the server does not deliver them again.
func TestRunnerKeepsQueuedTasksAlive(t *testing.T) {
	t.Parallel()
	e := newLaneEnv(t, time.Second, 2*time.Second)
	for i := 1; i <= 3; i++ {
		e.publish("k", fmt.Sprintf("k/%d", i))
	}
	var f *fake
	f = newFake(e, 0, func(p *ptask) time.Duration {
		if p.id != "k/1" {
			return 0
		}
		// A long task, kept alive as a worker keeps its running tasks.
		tick := time.NewTicker(e.ackWait / 4)
		defer tick.Stop()
		end := time.After(3 * e.ackWait)
		for {
			select {
			case <-tick.C:
				_ = p.m.InProgress()
			case <-end:
				return 0
			case <-f.quit:
				return 0
			}
		}
	})
	f.start(f.config(e))
	f.waitFor(settleWait, "ack", "k/1", "k/2", "k/3")

	for _, ev := range f.events("recv") {
		if ev.n > 1 {
			t.Errorf("%s delivered %d times", ev.id, ev.n)
		}
	}
	if got := f.ids("start"); !slices.Equal(got, []string{"k/1", "k/2", "k/3"}) {
		t.Errorf("started %v", got)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.beats["k/2"] == 0 || f.beats["k/3"] == 0 || f.beats["k/1"] != 0 {
		t.Errorf("beats %v, want k/2 and k/3 only", f.beats)
	}
}

// Stopping the runner returns from Run after handing back the tasks
// queued behind their key and those offered that wait for a slot; a task
// running then still settles, and starts nothing more.
func TestRunnerStopHandsBackWhatWaits(t *testing.T) {
	t.Parallel()
	e := newLaneEnv(t, longAckWait, time.Second)
	for _, id := range []string{"a/1", "b/1", "c/1", "a/2"} {
		e.publish(id[:1], id)
	}
	release := make(chan struct{})
	var f *fake
	f = newFake(e, 1, func(p *ptask) time.Duration {
		if p.id == "a/1" {
			f.hold(release)
		}
		return 0
	})
	stop := f.start(f.config(e))
	f.waitFor(settleWait, "start", "a/1")
	f.waitFor(settleWait, "offer", "b/1", "c/1")
	testutil.Wait(t, settleWait, "a/2 queued behind a/1", func() bool {
		q := f.r.Gate().Queued()
		return len(q) == 1 && q[0].id == "a/2"
	})
	stop()

	if !f.has("back", "a/2", "b/1", "c/1") || !f.has("withdraw", "b/1", "c/1") {
		t.Errorf("after stop: handed back %v, withdrawn %v; want a/2, b/1, c/1 and b/1, c/1", f.ids("back"), f.ids("withdraw"))
	}
	if f.has("back", "a/1") || f.has("withdraw", "a/1") {
		t.Error("the running a/1 was handed back")
	}
	close(release)
	f.waitFor(settleWait, "ack", "a/1")
	f.tasks.Wait()
	if got := f.ids("start"); !slices.Equal(got, []string{"a/1"}) {
		t.Errorf("started %v, want a/1 only", got)
	}
	if held := f.r.Gate().Held(); held != 0 {
		t.Errorf("the stopped runner's gate holds %d deliveries", held)
	}
}

// What a stopping runner hands back goes to the lane's next owner at
// once, as its second delivery: not to the stopping runner's own pull
// request, still open, from which it would come back only after the ack
// wait (or, caught in its buffer, after one more delivery).
func TestRunnerStopHandsBackAfterItStopsPulling(t *testing.T) {
	t.Parallel()
	// A long PinnedTTL keeps the stopping runner's pull request open (its
	// requests expire in half of it); the test then moves the pin itself.
	e := newLaneEnv(t, longAckWait, 10*time.Second)
	const queued = 20
	var back []string
	e.publish("a", "a/0")
	for i := 1; i <= queued; i++ {
		id := fmt.Sprintf("a/%d", i)
		e.publish("a", id)
		back = append(back, id)
	}
	var f *fake
	f = newFake(e, 0, func(p *ptask) time.Duration {
		f.hold(nil)
		return 0
	})
	stop := f.start(f.config(e))
	f.waitFor(settleWait, "start", "a/0")
	testutil.Wait(t, settleWait, "the key's tasks queued", func() bool { return len(f.r.Gate().Queued()) == queued })
	stop()
	f.waitFor(settleWait, "back", back...)
	s, err := e.js.Stream(t.Context(), e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.UnpinConsumer(t.Context(), e.cons.CachedInfo().Name, topology.LaneGroup); err != nil {
		t.Fatal(err)
	}

	g := newFake(e, 0, func(*ptask) time.Duration { return 0 })
	g.start(g.config(e))
	testutil.Wait(t, settleWait, "the tasks handed back delivered to the next owner", func() bool { return g.has("recv", back...) })
	for _, ev := range g.events("recv") {
		if ev.n != 2 {
			t.Errorf("%s reached the next owner as delivery %d, want 2", ev.id, ev.n)
		}
	}
}

// A task handed back that the stream then drops (here deleted; in a
// worker, dead-lettered after its last delivery) holds its key only until
// the runner finds it gone, two ack waits after the hand-back.
func TestRunnerForgetsAnAwaitedTaskTheStreamDropped(t *testing.T) {
	t.Parallel()
	e := newLaneEnv(t, time.Second, 2*time.Second)
	a1 := e.publish("a", "a/1")
	e.publish("a", "a/2")
	e.publish("b", "b/1")
	f := newFake(e, 0, func(p *ptask) time.Duration {
		if p.id == "a/1" {
			return time.Minute
		}
		return 0
	})
	f.start(f.config(e))
	f.waitFor(settleWait, "nak", "a/1")
	f.waitFor(settleWait, "ack", "b/1")
	deleted := len(f.events(""))
	s, err := e.js.Stream(t.Context(), e.names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteMsg(t.Context(), a1); err != nil {
		t.Fatal(err)
	}
	f.waitFor(settleWait, "ack", "a/2")
	if i := f.index("start", "a/2"); i < deleted {
		t.Errorf("a/2 started while a/1 was awaited: %v", f.events(""))
	}
	if got := slices.DeleteFunc(f.ids("start"), func(id string) bool { return id[0] != 'a' }); !slices.Equal(got, []string{"a/1", "a/2"}) {
		t.Errorf("key a started %v", got)
	}
	for _, ev := range f.events("recv") {
		if ev.n > 1 {
			t.Errorf("%s delivered %d times", ev.id, ev.n)
		}
	}
}

// A runner whose pull cannot open retries, re-ensuring the consumer.
func TestRunnerRetriesAFailedOpen(t *testing.T) {
	t.Parallel()
	e := newLaneEnv(t, longAckWait, 2*time.Second)
	e.publish("a", "a/1")
	f := newFake(e, 0, func(*ptask) time.Duration { return 0 })
	f.failOpen.Store(2)
	f.start(f.config(e))
	f.waitFor(settleWait, "ack", "a/1")
	if n := f.ensured.Load(); n != 2 {
		t.Errorf("ensured %d times after two failed opens", n)
	}
}

// A runner told that another worker should own its lane (Candidate) stops
// asking for tasks but runs what its open request still brings: handed
// back, those would come straight back to that request, each time
// spending a delivery. Once the request is done it unpins the lane, and
// the next owner takes it over.
func TestRunnerStandsDownWithoutHandingBackItsArrivals(t *testing.T) {
	t.Parallel()
	e := newLaneEnv(t, longAckWait, 6*time.Second) // requests expire in 3 s
	var own atomic.Bool
	own.Store(true)
	leaving := make(chan struct{})
	var once sync.Once
	first := newFake(e, 0, func(*ptask) time.Duration { return 0 })
	cfg := first.config(e)
	cfg.Candidate = func() bool {
		if own.Load() {
			return true
		}
		once.Do(func() { close(leaving) })
		return false
	}
	cfg.Unpin = func(ctx context.Context) error {
		s, err := e.js.Stream(ctx, e.names.TaskStream())
		if err != nil {
			return err
		}
		return s.UnpinConsumer(ctx, e.cons.CachedInfo().Name, topology.LaneGroup)
	}
	first.start(cfg)
	for i := range 3 {
		e.publish(fmt.Sprintf("a%d", i), fmt.Sprintf("a%d/1", i))
	}
	first.waitFor(settleWait, "ack", "a0/1", "a1/1", "a2/1")
	own.Store(false)
	testutil.Recv(t, leaving, settleWait, "the runner told to leave")
	// Its request is still open (it expires 3 s after it was sent): the
	// server delivers these to it.
	for i := range 3 {
		e.publish(fmt.Sprintf("b%d", i), fmt.Sprintf("b%d/1", i))
	}
	second := newFake(e, 0, func(*ptask) time.Duration { return 0 })
	second.start(second.config(e))
	for i := range 3 {
		e.publish(fmt.Sprintf("c%d", i), fmt.Sprintf("c%d/1", i))
	}
	all := []string{"b0/1", "b1/1", "b2/1", "c0/1", "c1/1", "c2/1"}
	testutil.Wait(t, settleWait, "the tasks published after the first runner was told to leave acked", func() bool {
		for _, id := range all {
			if !first.has("ack", id) && !second.has("ack", id) {
				return false
			}
		}
		return true
	})
	if back := first.ids("back"); len(back) != 0 {
		t.Errorf("the leaving runner handed back %v", back)
	}
	for _, ev := range second.events("recv") {
		if ev.n > 1 {
			t.Errorf("%s reached the next owner as delivery %d", ev.id, ev.n)
		}
	}
}
