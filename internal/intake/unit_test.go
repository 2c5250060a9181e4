package intake

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/attempt"
	"github.com/jetflow-io/jetflow/internal/dispatch"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/settle"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// fakeMsg is a delivery whose operations are counted, and fail with err.
type fakeMsg struct {
	jetstream.Msg // nil: other operations panic
	err           error
	naks, beats   int
	acks          int
}

func (m *fakeMsg) Nak() error        { m.naks++; return m.err }
func (m *fakeMsg) InProgress() error { m.beats++; return m.err }
func (m *fakeMsg) Ack() error        { m.acks++; return m.err }

// unit returns a stage without a server, and its counters and reports.
func unit(t *testing.T, concurrency int) (*Stage[*reg, work], *Counters, *[]string) {
	t.Helper()
	names, err := streams.NewNames("")
	if err != nil {
		t.Fatal(err)
	}
	c := &Counters{HandedBack: new(atomic.Uint64), AckErrors: new(atomic.Uint64), PullsLost: new(atomic.Uint64),
		StartedDirect: new(atomic.Uint64)}
	var failed []string
	s := New(Config[*reg, work]{Names: names, Log: slog.New(slog.DiscardHandler), Concurrency: concurrency,
		Weights: [4]int{8, 4, 2, 1}, Counters: *c,
		AckFailed: func(_ *task, op string, _ error) { failed = append(failed, op) }})
	return s, c, &failed
}

// A task is handed back once, whoever asks first; a nak that fails is
// reported, not counted as handed back.
func TestHandBackOnce(t *testing.T) {
	t.Parallel()
	s, c, failed := unit(t, 1)
	typ := &Type[*reg]{Spec: Spec{Name: "a"}}
	s.Add(typ)
	m := &fakeMsg{}
	p := newPending[*reg, work](typ, streams.PriorityNormal, m)
	s.HandBack(p, "test")
	s.HandBack(p, "again")
	if m.naks != 1 || c.HandedBack.Load() != 1 || p.Claim() {
		t.Errorf("%d naks, %d handed back, claimable %v: want 1, 1, false", m.naks, c.HandedBack.Load(), p.Claim())
	}
	bad := &fakeMsg{err: errors.New("closed")}
	q := newPending[*reg, work](typ, streams.PriorityNormal, bad)
	s.HandBack(q, "test")
	if c.HandedBack.Load() != 1 || len(*failed) != 1 || (*failed)[0] != "nak" {
		t.Errorf("failed nak: %d handed back, reports %v", c.HandedBack.Load(), *failed)
	}
	// Without a pull message or an acker, Ack goes to the message.
	if err := s.Ack(q, 1); err != bad.err || bad.acks != 1 {
		t.Errorf("Ack = %v after %d acks", err, bad.acks)
	}
}

// A pending task's heartbeat clock starts at its receipt and moves with
// each heartbeat; a settled one needs none.
func TestPendingClock(t *testing.T) {
	t.Parallel()
	typ := &Type[*reg]{Heartbeat: 3 * time.Second}
	m := &fakeMsg{}
	before := time.Now().UnixNano()
	p := newPending[*reg, work](typ, streams.PriorityHigh, m)
	every, last, settled := p.Clock()
	if every != 3*time.Second || last < before || settled {
		t.Errorf("Clock = %v, %d, %v", every, last, settled)
	}
	if err := p.InProgress(); err != nil || m.beats != 1 {
		t.Errorf("InProgress = %v, %d beats", err, m.beats)
	}
	p.Beaten(42)
	if !p.Claim() || p.Claim() {
		t.Error("Claim is not once")
	}
	if _, last, settled := p.Clock(); last != 42 || !settled {
		t.Errorf("after a beat and a claim: %d, %v", last, settled)
	}
	p.LaneSettled(true) // no lane: nothing to tell
}

// A parked task lends its slot and resumes through the scheduler.
func TestParkedTaskLendsItsSlot(t *testing.T) {
	t.Parallel()
	s, _, _ := unit(t, 1)
	typ := &Type[*reg]{Spec: Spec{Name: "a"}, Concurrency: 1, Heartbeat: time.Hour}
	s.Add(typ)
	ran := make(chan *task, 1)
	s.Start(func(p *task) { ran <- p })
	defer s.StopBackground(true)
	p, ok := s.sched.StartNew(typ.Slots, func() *task { return newPending[*reg, work](typ, streams.PriorityNormal, &fakeMsg{}) })
	if !ok {
		t.Fatal("no slot for the first task")
	}
	s.execs.Add(1)
	q := newPending[*reg, work](typ, streams.PriorityNormal, &fakeMsg{})
	s.offer(q) // waits: the one slot is p's
	if s.NumWaiting(streams.PriorityNormal.Rank()) != 1 {
		t.Fatal("the second task does not wait")
	}
	if next := s.LendSlot(p); next != q {
		t.Fatalf("LendSlot gave %v, want the waiting task", next)
	}
	<-q.dispatched
	if !p.Resumed() || p.Resumed() {
		t.Error("Resumed is not once after LendSlot")
	}
	s.Requeue(p) // waits for q's slot
	if !s.Withdraw(p) || s.Withdraw(p) {
		t.Error("Withdraw is not once")
	}
	s.Reclaim(p) // takes the lent slot back and runs p on an executor
	if got := <-ran; got != p {
		t.Error("Reclaim ran another task")
	}
	if s.NumRunning() != 2 {
		t.Errorf("%d running after Reclaim, want 2", s.NumRunning())
	}
	if p.Orphaned() {
		t.Error("a task without a lane is orphaned")
	}
}

// Pull sizes: the user's prefetch as is, else a batch that shrinks while a
// higher priority competes.
func TestPullSize(t *testing.T) {
	t.Parallel()
	s, _, _ := unit(t, 10)
	now := time.Now()
	fixed := &Type[*reg]{Spec: Spec{Name: "f"}, Prefetch: 7, PrefetchSet: true}
	typ := &Type[*reg]{Spec: Spec{Name: "a"}, Concurrency: 10, Prefetch: 10}
	s.Add(fixed)
	s.Add(typ)
	typ.Pace.Observe(time.Millisecond)
	if got := s.PullSize(fixed, streams.PriorityLow, now); got != 7 {
		t.Errorf("fixed prefetch: %d, want 7", got)
	}
	alone := s.PullSize(typ, streams.PriorityLow, now)
	if want := pull.Batch(10, 10, topology.DefaultMaxAckPending, typ.Pace.Average(), false); alone != want || alone <= 10 {
		t.Errorf("alone: %d, want %d", alone, want)
	}
	hi := newPending[*reg, work](typ, streams.PriorityCritical, &fakeMsg{})
	s.Stamp(hi, now)
	competing := s.PullSize(typ, streams.PriorityLow, now)
	if want := 10; competing != want || competing >= alone {
		t.Errorf("after a critical task started: %d, want %d (below %d)", competing, want, alone)
	}
	if got := s.PullSize(typ, streams.PriorityCritical, now); got != alone {
		t.Errorf("critical itself: %d, want %d", got, alone)
	}
	if typ.Pace.Resizes() == 0 {
		t.Error("no resize counted")
	}
	// A task of a higher priority waiting for a slot competes too.
	s.sched.Offer(newPending[*reg, work](typ, streams.PriorityHigh, &fakeMsg{}), streams.PriorityHigh.Rank(), dispatch.NewClass(0))
	if !s.higherWaiting(streams.PriorityNormal) || s.higherWaiting(streams.PriorityHigh) {
		t.Error("higherWaiting does not see the waiting high task")
	}
}

// LaneGate: strict order unless a key may run more than one task.
func TestLaneGate(t *testing.T) {
	t.Parallel()
	if g := LaneGate(0, nil); !g.Ordered || g.Limit != nil {
		t.Errorf("default: %+v, want ordered", g)
	}
	if g := LaneGate(3, nil); g.Ordered || g.Limit("k") != 3 {
		t.Errorf("PerKey 3: ordered %v", g.Ordered)
	}
	g := LaneGate(2, func(key string) int {
		if key == "big" {
			return 5
		}
		return 0
	})
	if g.Ordered || g.Limit("big") != 5 || g.Limit("small") != 2 {
		t.Errorf("Limit: big %d small %d", g.Limit("big"), g.Limit("small"))
	}
}

// Redelivered: the settlements that leave the task to the server.
func TestRedelivered(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		s    attempt.Settlement
		want bool
	}{
		{"acked", attempt.Settlement{Decision: settle.Decision{Action: settle.Ack}, Carried: settle.Carried{Sent: true}}, false},
		{"ack not sent", attempt.Settlement{Decision: settle.Decision{Action: settle.Ack}}, true},
		{"retry", attempt.Settlement{Decision: settle.Decision{Action: settle.Retry}}, true},
		{"handed back", attempt.Settlement{Decision: settle.Decision{Action: settle.HandBack}}, true},
		{"dead-lettered", attempt.Settlement{Decision: settle.Decision{Action: settle.Fail}}, false},
		{"dead letter not written", attempt.Settlement{Decision: settle.Decision{Action: settle.Fail},
			Carried: settle.Carried{DeadLetterErr: errors.New("down")}}, true},
	}
	for _, tc := range tests {
		if got := Redelivered(tc.s); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
