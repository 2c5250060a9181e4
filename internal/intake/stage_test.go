package intake

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// Every task of every (type, priority) consumer runs once and is acked; a
// task that reaches an empty buffer with a slot free starts directly.
func TestStageRunsEveryTask(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4, streams.Config{})
	a := h.add("a", streams.PriorityHigh, streams.PriorityNormal)
	h.add("b", streams.PriorityLow)
	srcs := h.start()
	if len(srcs) != 3 || srcs[0].Type != a || srcs[0].Prio != streams.PriorityHigh || srcs[2].Type.Name != "b" {
		t.Fatalf("sources %+v: want a/high, a/normal, b/low", srcs)
	}
	// Once a fetch loop polls, its iterator takes arrivals directly.
	name := h.names.ConsumerName("a", streams.PriorityHigh)
	testutil.Wait(t, bound, "a/high polling", func() bool { return !h.loops.Loop(name).LastPoll().IsZero() })
	h.publish(h.names.TaskSubject(streams.PriorityHigh, "a"), "first", nil)
	if p := h.next(); string(p.Msg.Data()) != "first" || p.Type != a || p.Prio != streams.PriorityHigh || p.X.runs != 1 {
		t.Fatalf("ran %s of %s at %v (%d runs)", p.Msg.Data(), p.Type.Name, p.Prio, p.X.runs)
	}
	if n := h.direct.Load(); n != 1 {
		t.Errorf("%d tasks started directly, want 1", n)
	}
	const n = 60
	for i := range n {
		prio, typ := streams.PriorityNormal, "a"
		if i%3 == 0 {
			prio, typ = streams.PriorityLow, "b"
		}
		h.publish(h.names.TaskSubject(prio, typ), fmt.Sprint(i), nil)
	}
	seen := map[string]bool{}
	for range n {
		p := h.next()
		if seen[string(p.Msg.Data())] {
			t.Fatalf("task %s ran twice", p.Msg.Data())
		}
		seen[string(p.Msg.Data())] = true
	}
	testutil.Wait(t, bound, "every task acked", func() bool {
		return h.consumer(h.names.ConsumerName("a", streams.PriorityNormal)).NumAckPending == 0 &&
			h.consumer(h.names.ConsumerName("b", streams.PriorityLow)).NumAckPending == 0
	})
	if h.s.NumRunning() != 0 || h.handedBack.Load() != 0 {
		t.Errorf("%d running, %d handed back after the tasks ran", h.s.NumRunning(), h.handedBack.Load())
	}
}

// With one slot, the tasks of one consumer run one at a time in stream
// order, whichever path brings each (the fetcher through the scheduler, or
// the executor from the pull buffer).
func TestStageOneSlotKeepsStreamOrder(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, streams.Config{})
	a := h.add("a", streams.PriorityNormal)
	a.Prefetch, a.PrefetchSet = 50, true
	h.gate = make(chan struct{})
	h.start()
	const n = 30
	for i := range n {
		h.publish(h.names.TaskSubject(streams.PriorityNormal, "a"), fmt.Sprint(i), nil)
	}
	first := h.next()
	// All delivered: one running, one waiting for the slot, the rest in
	// the pull buffer.
	testutil.Wait(t, bound, "every task delivered", func() bool {
		return h.consumer(h.names.ConsumerName("a", streams.PriorityNormal)).NumAckPending == n
	})
	close(h.gate)
	buffered := 0
	for i := 1; i < n; i++ {
		p := h.next()
		if got := string(p.Msg.Data()); got != fmt.Sprint(i) {
			t.Fatalf("task %s ran as the %dth after %s", got, i, first.Msg.Data())
		}
		if p.dispatched == nil {
			buffered++ // taken from the pull buffer
		}
	}
	t.Logf("%d of %d tasks taken from the pull buffer, %d started directly", buffered, n, h.direct.Load())
}

// At the shutdown deadline the running tasks are handed back, once each,
// and the handlers' contexts cancelled; their executions, returning, settle
// nothing more.
func TestStageDrainHandsBackAtDeadline(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2, streams.Config{})
	h.add("a", streams.PriorityNormal)
	h.gate = make(chan struct{})
	h.start()
	h.publish(h.names.TaskSubject(streams.PriorityNormal, "a"), "1", nil)
	h.publish(h.names.TaskSubject(streams.PriorityNormal, "a"), "2", nil)
	h.next()
	h.next()
	h.s.Stop()
	select {
	case <-h.s.Stopped():
	default:
		t.Fatal("Stopped not closed by Stop")
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel() // the deadline passed already
	cancelled := false
	// The handlers ignore the cancellation: both tasks are handed back,
	// and the drain gives up on them after its grace.
	back, idle, err := h.s.Drain(ctx, func() { cancelled = true })
	if back != 2 || idle || !errors.Is(err, context.Canceled) || !cancelled {
		t.Fatalf("Drain = %d, %v, %v (cancelled %v): want 2, false, canceled", back, idle, err, cancelled)
	}
	if n := h.handedBack.Load(); n != 2 {
		t.Errorf("%d handed back, want 2", n)
	}
	close(h.gate) // the handlers return: their tasks were handed back already
}

// A worker that stops with nothing running drains at once.
func TestStageDrainIdle(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2, streams.Config{})
	h.add("a", streams.PriorityNormal)
	h.start()
	h.s.Stop()
	h.s.Stop() // again: no effect
	cancelled := false
	back, idle, err := h.s.Drain(t.Context(), func() { cancelled = true })
	if back != 0 || !idle || err != nil || !cancelled {
		t.Fatalf("Drain = %d, %v, %v (cancelled %v): want 0, true, nil, cancelled", back, idle, err, cancelled)
	}
}

// Partitions added to the deployment are served at the next check: their
// consumers, the worker's own (Grown), their fetchers.
func TestStageServesAddedPartitions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 2, streams.Config{})
	h.add("a", streams.PriorityNormal)
	h.start()
	if got := h.s.Partitions().Names(); len(got) != 1 {
		t.Fatalf("serving %d partitions, want 1", len(got))
	}
	h.s.CheckPartitions(t.Context()) // nothing added: nothing done
	select {
	case c := <-h.grownFor:
		t.Fatalf("Grown called for %d partitions before any was added", c)
	default:
	}
	if _, err := streams.Ensure(t.Context(), h.env.JS, streams.Config{Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	h.s.CheckPartitions(t.Context())
	if c := testutil.Recv(t, h.grownFor, bound, "Grown"); c != 2 {
		t.Errorf("Grown for %d partitions, want 2", c)
	}
	if got := h.s.Partitions().Streams(); len(got) != 2 {
		t.Fatalf("serving streams %v, want 2", got)
	}
	p1 := h.names.Partition(1)
	h.publish(p1.TaskSubject(streams.PriorityNormal, "a"), "in 1", nil)
	if p := h.next(); string(p.Msg.Data()) != "in 1" {
		t.Errorf("ran %s", p.Msg.Data())
	}
	// Stopped, the stage serves no further partition.
	h.s.Stop()
	if _, err := streams.Ensure(t.Context(), h.env.JS, streams.Config{Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	h.s.CheckPartitions(t.Context())
	if got := h.s.Partitions().Names(); len(got) != 2 {
		t.Errorf("serving %d partitions after Stop, want 2", len(got))
	}
}

// The tasks of a lane run in key order through its runner; the lanes the
// worker holds are listed for its registry record.
func TestStageLanes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4, streams.Config{})
	o := h.add("o", streams.PriorityNormal)
	o.Priorities = nil // no (type, priority) consumer: lanes only
	o.Lanes, o.Gate = 2, LaneGate(0, nil)
	lanes, err := h.s.EnsureOrdered(t.Context(), o, Ordered{TaskType: "o", Lanes: o.Lanes}, []streams.Names{h.names})
	if err != nil {
		t.Fatal(err)
	}
	h.start(lanes...)
	const n = 20
	for i := range n {
		key := fmt.Sprintf("k%d", i%2)
		h.publish(h.names.OrderedSubject("o", i%2), fmt.Sprintf("%s %d", key, i), nats.Header{ordering.HeaderKey: {key}})
	}
	last := map[string]int{}
	for range n {
		p := h.next()
		var key string
		var i int
		if _, err := fmt.Sscanf(string(p.Msg.Data()), "%s %d", &key, &i); err != nil {
			t.Fatal(err)
		}
		if prev, ok := last[key]; ok && prev > i {
			t.Errorf("key %s ran %d after %d", key, i, prev)
		}
		last[key] = i
		if p.lane == nil {
			t.Errorf("task %s has no lane", p.Msg.Data())
		}
	}
	testutil.Wait(t, bound, "both lanes listed", func() bool {
		held := h.s.HeldLanes()
		return len(held) == 2 && held[0].Type == "o" && held[0].Lane == 0 && held[1].Lane == 1 && held[0].Lanes == 2
	})
}

// The direct path and the buffered take refuse a stopped stage.
func TestStageStoppedStartsNothingDirectly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, streams.Config{})
	a := h.add("a", streams.PriorityNormal)
	h.start()
	h.s.Stop()
	if h.s.startDirect(a, streams.PriorityNormal, nil)(nil) {
		t.Error("a stopped stage started a task directly")
	}
	p := newPending[*reg, work](a, streams.PriorityNormal, &fakeMsg{})
	if q := h.s.takeBuffered(p); q != nil {
		t.Error("a task without a feed took a buffered one")
	}
}
