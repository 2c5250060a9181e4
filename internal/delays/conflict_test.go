package delays_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// moverEnv is one server with the topology ensured and the movers'
// rejections recorded.
type moverEnv struct {
	srv      *testutil.Server
	nc       *nats.Conn
	js       jetstream.JetStream
	n        streams.Names
	rejected chan delays.Rejected
}

func newMoverEnv(t *testing.T, c streams.Config) *moverEnv {
	t.Helper()
	s := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, s)
	if _, err := streams.Ensure(t.Context(), js, c); err != nil {
		t.Fatal(err)
	}
	return &moverEnv{srv: s, nc: nc, js: js, n: streams.MustNames(c.Prefix), rejected: make(chan delays.Rejected, 16)}
}

// mover returns a mover on nc that records what it rejects, and runs it
// until the test ends.
func (e *moverEnv) mover(t *testing.T, nc *nats.Conn, log *slog.Logger, setup func(*delays.Mover)) *delays.Mover {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := delays.New(nc, js, topology.DelayTopology(e.n), log, func(_ context.Context, r delays.Rejected) error {
		e.rejected <- r
		return nil
	})
	if setup != nil {
		setup(m)
	}
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { m.Run(ctx) })
	t.Cleanup(func() { stop(); wg.Wait() })
	return m
}

// delayed publishes the delayed task id of type "a" due at due with
// payload data, under the Nats-Msg-Id msgID, and returns its sequence in
// the delay stream. A due time already past is published as the delayed
// task of a producer whose clock is late.
func (e *moverEnv) delayed(t *testing.T, id, msgID string, due time.Time, data string) uint64 {
	t.Helper()
	now := time.Now()
	if !due.After(now) {
		now = due.Add(-time.Second) // still a delayed task
	}
	msg, _ := taskmsg.Build(taskmsg.Spec{Target: e.n.TaskSubject(streams.PriorityNormal, "a"), ID: id, Data: []byte(data),
		Due: due, Now: now, DelaySubject: e.n.DelaySubject(id), ScheduleTarget: e.n.FiredSubject(streams.PriorityNormal, "a")})
	msg.Header.Set(jetstream.MsgIDHeader, msgID)
	ack, err := e.js.PublishMsg(t.Context(), msg)
	if err != nil {
		t.Fatalf("publish delayed task %s: %v", id, err)
	}
	if ack.Duplicate {
		t.Fatalf("delayed task %s (Nats-Msg-Id %s) taken as a duplicate by the delay stream", id, msgID)
	}
	return ack.Sequence
}

// schedule returns the last message on the schedule subject of id, or nil.
func (e *moverEnv) schedule(t *testing.T, id string) *jetstream.RawStreamMsg {
	t.Helper()
	s, err := e.js.Stream(t.Context(), e.n.ScheduleStream())
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(t.Context(), e.n.ScheduleSubject(id))
	if err != nil {
		return nil
	}
	return m
}

func (e *moverEnv) waitDelayStreamEmpty(t *testing.T) {
	t.Helper()
	testutil.Wait(t, 30*time.Second, "an empty delay stream", func() bool {
		s, err := e.js.Stream(t.Context(), e.n.DelayStream())
		return err == nil && s.CachedInfo().State.Msgs == 0
	})
}

// A second delayed task under the ID of a pending one, whether it reaches
// the mover with another Nats-Msg-Id inside the duplicate window or with
// the same one after it, does not replace the pending schedule: the
// schedule stays as it was (sequence, due time, payload), the newcomer is
// rejected as a conflict and counted.
func TestConflictKeepsThePendingSchedule(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		window time.Duration
		msgID  string
	}{
		{name: "another Nats-Msg-Id in the window", msgID: "evil"},
		{name: "the same Nats-Msg-Id after the window", window: time.Second, msgID: "victim"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newMoverEnv(t, streams.Config{DuplicateWindow: c.window})
			m := e.mover(t, e.nc, nil, nil)
			due := time.Now().Add(time.Hour)
			e.delayed(t, "victim", "victim", due, `"victim"`)
			testutil.Wait(t, 30*time.Second, "the victim's schedule", func() bool { return m.Moved.Load() == 1 })
			before := e.schedule(t, "victim")
			if before == nil {
				t.Fatal("no schedule stored for the victim")
			}
			if c.window > 0 {
				passed := time.Now().Add(c.window + 100*time.Millisecond)
				testutil.Wait(t, 30*time.Second, "the duplicate window to pass", func() bool { return time.Now().After(passed) })
			}
			seq := e.delayed(t, "victim", c.msgID, time.Now(), `"attacker"`)
			r := testutil.Recv(t, e.rejected, 30*time.Second, "the newcomer rejected")
			if !r.Conflict || r.ID != "victim" || r.Seq != seq || r.Type != "a" || string(r.Data) != `"attacker"` {
				t.Errorf("rejected %+v, want the newcomer (sequence %d) as a conflict", r, seq)
			}
			if r.Cause == nil || !strings.Contains(r.Cause.Error(), "already has a pending schedule") {
				t.Errorf("cause %v", r.Cause)
			}
			e.waitDelayStreamEmpty(t)
			after := e.schedule(t, "victim")
			if after == nil || after.Sequence != before.Sequence || string(after.Data) != `"victim"` ||
				after.Header.Get(jetstream.ScheduleHeader) != before.Header.Get(jetstream.ScheduleHeader) {
				t.Fatalf("the victim's schedule changed: before %d %s %v, after %+v", before.Sequence, before.Data, before.Header, after)
			}
			if m.Conflicts.Load() != 1 || m.Rejects.Load() != 0 || m.Moved.Load() != 1 {
				t.Errorf("moved %d, rejected %d, conflicts %d; want 1, 0, 1", m.Moved.Load(), m.Rejects.Load(), m.Conflicts.Load())
			}
		})
	}
}

// A delayed task whose mover stored its schedule and then lost its
// connection before acknowledging it is delivered again, to another
// mover: that mover finds the schedule it would store, from the same
// delayed task, and acknowledges the task without a conflict.
func TestRedeliveryOfAMovedTaskIsNoConflict(t *testing.T) {
	t.Parallel()
	e := newMoverEnv(t, streams.Config{})
	// A short ack wait, so that the redelivery comes soon.
	cfg := streamdefs.DelayConsumerConfig(e.n)
	cfg.AckWait = time.Second
	if _, err := e.js.UpdateConsumer(t.Context(), e.n.DelayStream(), cfg); err != nil {
		t.Fatal(err)
	}
	first := testutil.Connect(t, e.srv)
	stored := make(chan struct{})
	e.mover(t, first, nil, func(m *delays.Mover) {
		delays.SetAfterPublish(m, func(string) {
			first.Close() // the acknowledgement never leaves
			close(stored)
		})
	})
	e.delayed(t, "again", "again", time.Now().Add(time.Hour), `"mine"`)
	testutil.Recv(t, stored, 30*time.Second, "the schedule stored by the first mover")
	before := e.schedule(t, "again")
	if before == nil {
		t.Fatal("the first mover stored no schedule")
	}
	second := e.mover(t, testutil.Connect(t, e.srv), nil, nil)
	e.waitDelayStreamEmpty(t)
	select {
	case r := <-e.rejected:
		t.Fatalf("the redelivered task was rejected: %+v", r)
	default:
	}
	if second.Conflicts.Load() != 0 || second.Rejects.Load() != 0 || second.Cancelled.Load() != 0 {
		t.Errorf("second mover: conflicts %d, rejects %d, cancelled %d; want none",
			second.Conflicts.Load(), second.Rejects.Load(), second.Cancelled.Load())
	}
	if after := e.schedule(t, "again"); after == nil || after.Sequence != before.Sequence {
		t.Errorf("the schedule is not the one the first mover stored: %+v", after)
	}
}

// Once a schedule fired, or was cancelled, its subject is free: a new
// delayed task with that ID (after the duplicate window) is stored.
func TestAFreedIDTakesANewSchedule(t *testing.T) {
	t.Parallel()
	e := newMoverEnv(t, streams.Config{DuplicateWindow: time.Second})
	m := e.mover(t, e.nc, nil, nil)
	e.delayed(t, "fires", "fires", time.Now().Add(100*time.Millisecond), `1`)
	e.delayed(t, "cancelled", "cancelled", time.Now().Add(time.Hour), `1`)
	testutil.Wait(t, 30*time.Second, "both moved", func() bool { return m.Moved.Load() == 2 })
	testutil.Wait(t, 30*time.Second, "the first schedule fired", func() bool { return e.schedule(t, "fires") == nil })
	if _, err := topology.DelayTopology(e.n).Cancel(t.Context(), e.nc, "cancelled"); err != nil {
		t.Fatal(err)
	}
	passed := time.Now().Add(1100 * time.Millisecond)
	testutil.Wait(t, 30*time.Second, "the duplicate window to pass", func() bool { return time.Now().After(passed) })
	for _, id := range []string{"fires", "cancelled"} {
		e.delayed(t, id, id, time.Now().Add(time.Hour), `2`)
	}
	testutil.Wait(t, 30*time.Second, "both moved again", func() bool { return m.Moved.Load() == 4 })
	for _, id := range []string{"fires", "cancelled"} {
		if s := e.schedule(t, id); s == nil || string(s.Data) != "2" {
			t.Errorf("%s: schedule %+v, want the new one", id, s)
		}
	}
	if m.Conflicts.Load() != 0 {
		t.Errorf("%d conflicts, want 0", m.Conflicts.Load())
	}
}

// syncBuffer is a bytes.Buffer for a logger shared by goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The deployment owns the movers' consumer: with it created by
// streams.Ensure, a mover whose user may neither create nor update it
// moves delayed tasks, and uses a consumer that differs from the wanted
// one as it is, with a warning naming the difference.
func TestMoverUsesTheConsumerItMayNotCreate(t *testing.T) {
	t.Parallel()
	s := testutil.RunConfigServer(t, `
accounts {
  APP {
    jetstream: enabled
    users: [
      {user: admin, password: admin}
      {user: worker, password: worker, permissions: {
        publish: {allow: [">"], deny: ["$JS.API.CONSUMER.CREATE.JETFLOW_DELAYS.>", "$JS.API.CONSUMER.DURABLE.CREATE.JETFLOW_DELAYS.>"]}
        subscribe: {allow: [">"]}
      }}
    ]
  }
}`)
	admin := testutil.Connect(t, s, nats.UserInfo("admin", "admin"))
	ajs, err := jetstream.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Ensure(t.Context(), ajs, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	n := streams.MustNames("")
	drifted := streamdefs.DelayConsumerConfig(n)
	drifted.MaxAckPending = 7
	if _, err := ajs.UpdateConsumer(t.Context(), n.DelayStream(), drifted); err != nil {
		t.Fatal(err)
	}
	e := &moverEnv{srv: s, nc: admin, js: ajs, n: n, rejected: make(chan delays.Rejected, 16)}
	var logs syncBuffer
	worker := testutil.Connect(t, s, nats.UserInfo("worker", "worker"))
	m := e.mover(t, worker, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	e.delayed(t, "task", "task", time.Now().Add(time.Hour), `1`)
	testutil.Wait(t, 30*time.Second, "the task moved", func() bool { return m.Moved.Load() == 1 })
	if !strings.Contains(logs.String(), "MaxAckPending is 7, want") {
		t.Errorf("no warning naming the drift; logs:\n%s", logs.String())
	}
	c, err := ajs.Consumer(t.Context(), n.DelayStream(), n.DelayConsumer())
	if err != nil {
		t.Fatal(err)
	}
	if got := c.CachedInfo().Config.MaxAckPending; got != 7 {
		t.Errorf("the mover changed its consumer: MaxAckPending %d", got)
	}
}

// Where no consumer exists (workers that may create it, no Ensure of
// this version), the mover creates it.
func TestMoverCreatesAMissingConsumer(t *testing.T) {
	t.Parallel()
	e := newMoverEnv(t, streams.Config{})
	if err := e.js.DeleteConsumer(t.Context(), e.n.DelayStream(), e.n.DelayConsumer()); err != nil {
		t.Fatal(err)
	}
	m := e.mover(t, e.nc, nil, nil)
	e.delayed(t, "task", "task", time.Now().Add(time.Hour), `1`)
	testutil.Wait(t, 30*time.Second, "the task moved", func() bool { return m.Moved.Load() == 1 })
	c, err := e.js.Consumer(t.Context(), e.n.DelayStream(), e.n.DelayConsumer())
	if err != nil {
		t.Fatal(err)
	}
	if d := delays.ConsumerDrift(streamdefs.DelayConsumerConfig(e.n), c.CachedInfo().Config); len(d) > 0 {
		t.Errorf("created consumer drifts: %v", d)
	}
}

func TestStoredFrom(t *testing.T) {
	t.Parallel()
	task := nats.Header{taskmsg.HeaderEnqueuedAt: {"2026-12-04T06:00:00Z"}}
	sched := func(kv ...string) nats.Header {
		h := nats.Header{jetstream.ScheduleHeader: {"@at 2026-12-04T07:00:00Z"}}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for _, c := range []struct {
		name string
		h    nats.Header
		data string
		want bool
	}{
		{"same origin", sched(delays.HeaderOrigin, "5@t"), "other payload", true},
		{"another origin", sched(delays.HeaderOrigin, "6@t", taskmsg.HeaderEnqueuedAt, "2026-12-04T06:00:00Z"), "p", false},
		{"no origin, same enqueue time and payload", sched(taskmsg.HeaderEnqueuedAt, "2026-12-04T06:00:00Z"), "p", true},
		{"no origin, another payload", sched(taskmsg.HeaderEnqueuedAt, "2026-12-04T06:00:00Z"), "q", false},
		{"no origin, another enqueue time", sched(taskmsg.HeaderEnqueuedAt, "2026-12-04T06:00:01Z"), "p", false},
		{"no schedule at all", nats.Header{taskmsg.HeaderEnqueuedAt: {"2026-12-04T06:00:00Z"}}, "p", false},
	} {
		if got := delays.StoredFrom(c.h, []byte(c.data), "5@t", task, []byte("p")); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestConsumerDrift(t *testing.T) {
	t.Parallel()
	want := streamdefs.DelayConsumerConfig(streams.MustNames(""))
	if d := delays.ConsumerDrift(want, want); len(d) != 0 {
		t.Errorf("no change: %v", d)
	}
	have := want
	have.FilterSubject = "jetflow.delay.nothing"
	have.AckWait = time.Hour
	future := time.Now().Add(time.Hour)
	have.PauseUntil = &future
	have.Description = "changed by an operator"
	var fields []string
	for _, d := range delays.ConsumerDrift(want, have) {
		fields = append(fields, d.Field)
	}
	if got := strings.Join(fields, ","); got != "AckWait,FilterSubject,PauseUntil" {
		t.Errorf("drift in %s, want AckWait,FilterSubject,PauseUntil", got)
	}
}
