package deadletter

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// killTask stores a task of type a and lets it reach its max deliveries:
// its consumer (MaxDeliver 1) delivers it once and it is refused. It
// returns the task's sequence; the task stays in the stream.
func killTask(t *testing.T, js jetstream.JetStream, id string) uint64 {
	t.Helper()
	ctx := t.Context()
	cons, err := js.CreateOrUpdateConsumer(ctx, testTopo.TaskStream, jetstream.ConsumerConfig{
		Durable: "task-normal-a", FilterSubject: "jetflow.task.normal.a",
		AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1, AckWait: 30 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	seq := storeTask(t, js, "jetflow.task.normal.a", id, nats.Header{"X-Tenant": {"acme"}}, "payload-"+id)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.Nak(); err != nil {
			t.Fatal(err)
		}
	}
	// The server gives up on the task when it would redeliver it, which
	// takes a pull.
	waitFor(t, "the task to be max-delivered", func() bool {
		if b, err := cons.FetchNoWait(1); err == nil {
			for m := range b.Messages() {
				t.Errorf("task %s delivered again", m.Subject())
			}
		}
		info, err := cons.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.Delivered.Stream >= seq
	})
	return seq
}

// The reconciler routes a max-delivered task no advisory routed: one
// record, reason max_deliveries, routed by the reconciler, carrying the
// last error the worker recorded; the task leaves the task stream; Routed
// hears of it.
func TestReconcileRoutesMaxDelivered(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	var mu sync.Mutex
	var routed []RoutedTask
	c.Routed = func(rt RoutedTask) { mu.Lock(); routed = append(routed, rt); mu.Unlock() }
	seq := killTask(t, js, "r1")
	c.RecordFailure(Attempt{Seq: seq, ID: "r1", Type: "a", Attempt: 1, Cause: errorString("gateway 503")})
	waitFor(t, "the failure recorded", func() bool {
		_, ok, err := c.LastFailure(t.Context(), seq, "r1")
		return err == nil && ok
	})
	n, err := c.Reconcile(t.Context(), 10*time.Millisecond)
	if err != nil || n != 1 {
		t.Fatalf("Reconcile = %d, %v; want 1, nil", n, err)
	}
	recs := records(t, js)
	if len(recs) != 1 {
		t.Fatalf("%d records; want 1", len(recs))
	}
	h := recs[0].Header
	if h.Get(HeaderReason) != ReasonMaxDeliveries || h.Get(HeaderRoutedBy) != routedByReconciler ||
		h.Get(HeaderLastError) != "gateway 503" || h.Get(HeaderOriginalSeq) != strconv.FormatUint(seq, 10) ||
		string(recs[0].Data) != "payload-r1" || h.Get("X-Tenant") != "acme" {
		t.Errorf("record %v %q", h, recs[0].Data)
	}
	if n := taskCount(t, js); n != 0 {
		t.Errorf("%d tasks left in the task stream; want 0", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(routed) != 1 || routed[0].TaskID != "r1" || routed[0].Seq != seq {
		t.Errorf("Routed heard %+v", routed)
	}
	// Nothing left: a second reconciliation routes nothing.
	if n, err := c.Reconcile(t.Context(), 10*time.Millisecond); n != 0 || err != nil {
		t.Errorf("second Reconcile = %d, %v; want 0, nil", n, err)
	}
}

// A task awaiting its acknowledgement is not taken for a dead one.
func TestReconcileLeavesInFlightTask(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	cons, err := js.CreateOrUpdateConsumer(t.Context(), testTopo.TaskStream, jetstream.ConsumerConfig{
		Durable: "task-normal-a", FilterSubject: "jetflow.task.normal.a", AckPolicy: jetstream.AckExplicitPolicy, MaxDeliver: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	storeTask(t, js, "jetflow.task.normal.a", "r2", nil, "x")
	if _, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery", func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.NumAckPending == 1
	})
	if n, err := c.Reconcile(t.Context(), 10*time.Millisecond); n != 0 || err != nil {
		t.Errorf("Reconcile = %d, %v; want 0, nil", n, err)
	}
	if n := taskCount(t, js); n != 1 {
		t.Errorf("%d tasks in the task stream; want 1", n)
	}
}

// The router routes the task of a max-deliveries advisory once, and drops
// advisories it cannot read without stopping.
func TestRouterRoutesAdvisory(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	// Hostile advisories first: not JSON, no sequence, a huge one.
	subj := advisoryMaxDeliveries + testTopo.TaskStream + ".task-normal-a"
	for _, data := range []string{"{not json", `{"stream_seq":0}`, `{"stream_seq":"x"}`, `[]`, string(make([]byte, 100<<10))} {
		if _, err := js.Publish(t.Context(), subj, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	killTask(t, js, "r3")
	waitFor(t, "the task routed", func() bool { return taskCount(t, js) == 0 && len(records(t, js)) == 1 })
	h := records(t, js)[0].Header
	if h.Get(HeaderRoutedBy) != routedByRouter || h.Get(taskmsg.HeaderTaskID) != "r3" || h.Get(HeaderDeliveries) != "1" {
		t.Errorf("record %v", h)
	}
	waitFor(t, "every advisory settled", func() bool {
		cons, err := js.Consumer(t.Context(), testTopo.AdvisoryStream, dlqRouterConsumer)
		if err != nil {
			return false
		}
		ci, err := cons.Info(t.Context())
		return err == nil && ci.NumAckPending == 0 && ci.NumPending == 0 && ci.Delivered.Stream >= 6
	})
}

type errorString string

func (e errorString) Error() string { return string(e) }

// confirmAdvisory takes from an advisory only which task to look at: a
// forged advisory naming a task its consumer has not delivered, a task of
// another consumer, a message stored after the advisory or a consumer that
// does not exist routes nothing.
func TestConfirmAdvisoryHostile(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	dead := killTask(t, js, "h1")
	undelivered := storeTask(t, js, "jetflow.task.normal.a", "h2", nil, "x")
	other := storeTask(t, js, "jetflow.task.low.b", "h3", nil, "x")
	if _, err := js.CreateOrUpdateConsumer(t.Context(), testTopo.TaskStream, jetstream.ConsumerConfig{
		Durable: "task-low-b", FilterSubject: "jetflow.task.low.b", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cases := []struct {
		name  string
		adv   dlqAdvisory
		found bool
	}{
		{"a real one", dlqAdvisory{Stream: testTopo.TaskStream, Consumer: "task-normal-a", StreamSeq: dead, Deliveries: 1 << 40}, true},
		{"no such sequence", dlqAdvisory{Stream: testTopo.TaskStream, Consumer: "task-normal-a", StreamSeq: 1 << 50}, false},
		{"not delivered", dlqAdvisory{Stream: testTopo.TaskStream, Consumer: "task-normal-a", StreamSeq: undelivered}, false},
		{"another consumer's task", dlqAdvisory{Stream: testTopo.TaskStream, Consumer: "task-normal-a", StreamSeq: other}, false},
		{"stored after the advisory", dlqAdvisory{Time: now.Add(-time.Hour), Stream: testTopo.TaskStream, Consumer: "task-normal-a", StreamSeq: dead}, false},
		{"a consumer that does not exist", dlqAdvisory{Stream: testTopo.TaskStream, Consumer: "task-low-c", StreamSeq: other}, false},
	}
	for _, tc := range cases {
		c.mu.Lock()
		clear(c.consumers) // each case asks its consumer
		c.mu.Unlock()
		adv := tc.adv
		found, err := c.confirmAdvisory(t.Context(), &adv)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if (found != nil) != tc.found {
			t.Errorf("%s: found %v; want %v", tc.name, found != nil, tc.found)
		}
		if found != nil && adv.Deliveries != 1 {
			t.Errorf("%s: deliveries %d; want the consumer's MaxDeliver 1", tc.name, adv.Deliveries)
		}
	}
	// In flight on a consumer with acks pending: awaited, tried later.
	cons, err := js.Consumer(t.Context(), testTopo.TaskStream, "task-low-b")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the delivery", func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.NumAckPending == 1
	})
	c.mu.Lock()
	clear(c.consumers)
	c.mu.Unlock()
	adv := dlqAdvisory{Stream: testTopo.TaskStream, Consumer: "task-low-b", StreamSeq: other}
	if found, err := c.confirmAdvisory(t.Context(), &adv); found != nil || err != errAwaited {
		t.Errorf("in flight: found %v, err %v; want nil, errAwaited", found != nil, err)
	}
}

// routeConfirmed routes nothing when the task is gone or was replaced.
func TestRouteConfirmedGone(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	seq := storeTask(t, js, "jetflow.task.normal.a", "g1", nil, "x")
	var found jsapi.Stored
	if _, err := jsapi.DirectGet(t.Context(), c.nc, testTopo.TaskStream, jsapi.GetRequest{Seq: seq}, func(m jsapi.Stored) error {
		found = m
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	changed := found
	changed.Time = found.Time.Add(-time.Second)
	if err := c.routeConfirmed(t.Context(), changed, dlqAdvisory{Deliveries: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DeleteMsg(t.Context(), testTopo.TaskStream, seq); err != nil {
		t.Fatal(err)
	}
	if err := c.routeConfirmed(t.Context(), found, dlqAdvisory{Deliveries: 1}); err != nil {
		t.Fatal(err)
	}
	if n := len(records(t, js)); n != 0 {
		t.Errorf("%d records; want 0", n)
	}
	// A stored message on a subject that is no work subject is refused.
	err := c.routeStored(t.Context(), jsapi.Stored{Subject: "elsewhere", Seq: 1}, 1, routedByRouter)
	if err == nil {
		t.Error("routeStored of a foreign subject succeeded")
	}
}
