package framework_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/testutil"
)

// forgeMaxDeliveries publishes a max-deliveries advisory for the task at seq
// of (typ, normal) that counts deliveries, as anyone allowed to publish on
// the advisory subjects can; the advisory stream stores it like the
// server's own.
func (e *env) forgeMaxDeliveries(t *testing.T, typ string, seq, deliveries uint64) {
	t.Helper()
	consumer := dlqNames.ConsumerName(typ, framework.PriorityNormal)
	adv, err := json.Marshal(map[string]any{
		"type": "io.nats.jetstream.advisory.v1.max_deliver", "stream": dlqNames.TaskStream(),
		"consumer": consumer, "stream_seq": seq, "deliveries": deliveries,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.nc.Publish("$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+dlqNames.TaskStream()+"."+consumer, adv); err != nil {
		t.Fatal(err)
	}
}

// routerConsumer returns the state of the dead-letter router's consumer
// (nil until it exists).
func (e *env) routerConsumer(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	c, err := e.js.Consumer(t.Context(), dlqNames.AdvisoryStream(), "dlq-router")
	if err != nil {
		return nil
	}
	ci, err := c.Info(t.Context())
	if err != nil {
		return nil
	}
	return ci
}

// Forged max-deliveries advisories route nothing. One names a task its
// consumer has not delivered yet: dropped. The other names a task in
// flight: looked at again until the task is acknowledged (and gone). Both
// tasks run once and nothing is dead-lettered.
func TestDeadLetterRouterIgnoresForgedAdvisories(t *testing.T) {
	t.Parallel()
	const waiting, busy = "dlq.forged.waiting", "dlq.forged.busy"
	e := newEnv(t)
	started, release := make(chan struct{}, 1), make(chan struct{})
	var busyRuns atomic.Int32
	w := e.worker(t)
	w.HandleFunc(busy, func(context.Context, *framework.Task) error {
		busyRuns.Add(1)
		started <- struct{}{}
		<-release
		return nil
	})
	startWorker(t, w)
	inFlight := e.enqueue(t, busy, nil, framework.WithID("busy-1"))
	testutil.Recv(t, started, waitLong, "the busy task's start")

	// The waiting type's consumer exists, but nobody pulls from it yet.
	if _, err := topology.EnsureConsumer(t.Context(), e.js, dlqNames, topology.ConsumerSpec{TaskType: waiting}); err != nil {
		t.Fatal(err)
	}
	undelivered := e.enqueue(t, waiting, nil, framework.WithID("waiting-1"))

	e.forgeMaxDeliveries(t, waiting, undelivered.Sequence, 25)
	e.forgeMaxDeliveries(t, busy, inFlight.Sequence, 25)
	// The first one acknowledged, the second looked at twice (or, wrongly,
	// routed).
	testutil.Wait(t, waitLong, "the router to look at the in-flight task twice", func() bool {
		ci := e.routerConsumer(t)
		return ci != nil && ci.NumPending == 0 && ci.NumAckPending <= 1 && ci.NumRedelivered >= 1 ||
			len(e.deadLetters(t)) > 0
	})
	if dls := e.deadLetters(t); len(dls) != 0 {
		t.Fatalf("forged advisories dead-lettered %d tasks: %+v", len(dls), dls[0])
	}

	close(release)
	ran := make(chan string, 1)
	w2 := e.worker(t)
	w2.HandleFunc(waiting, func(_ context.Context, task *framework.Task) error {
		ran <- task.ID
		return nil
	})
	startWorker(t, w2)
	if id := testutil.Recv(t, ran, waitLong, "the waiting task's run"); id != "waiting-1" {
		t.Errorf("ran %s", id)
	}
	testutil.Wait(t, waitLong, "both tasks done", func() bool { return e.taskStreamMsgs(t) == 0 })
	e.waitRouterIdle(t)
	if dls := e.deadLetters(t); len(dls) != 0 {
		t.Errorf("forged advisories dead-lettered %d tasks: %+v", len(dls), dls[0])
	}
	if n := busyRuns.Load(); n != 1 {
		t.Errorf("the busy task ran %d times, want 1", n)
	}
}

// A task the router has confirmed dead is routed only if it is still stored
// a grace period later: the server moves its consumer's ack floor a moment
// before it deletes an acknowledged task, so a forged advisory could
// otherwise catch one in that moment. Here the task is deleted right after
// its confirmation, as an acknowledged one would be: nothing is routed.
//
// Not parallel: the hook is the package's, seen by every router.
func TestDeadLetterRouterLooksAgainAfterConfirming(t *testing.T) {
	e := newEnv(t)
	dead := dieWithoutDeadLetters(t, e, "dlq.lookagain", 1)[0]
	confirmed := make(chan uint64, 1)
	deadletter.SetConfirmedHookForTest(func(seq uint64) {
		s, err := e.js.Stream(context.Background(), dlqNames.TaskStream())
		if err == nil {
			err = s.DeleteMsg(context.Background(), seq)
		}
		if err != nil {
			t.Errorf("delete the confirmed task: %v", err)
		}
		select {
		case confirmed <- seq:
		default:
		}
	})
	t.Cleanup(func() { deadletter.SetConfirmedHookForTest(nil) })
	w := e.worker(t)
	w.HandleFunc("dlq.other", noopHandler)
	startWorker(t, w)
	if seq := testutil.Recv(t, confirmed, waitLong, "the confirmation"); seq != dead.Sequence {
		t.Errorf("confirmed %d, want %d", seq, dead.Sequence)
	}
	e.waitRouterIdle(t)
	if dls := e.deadLetters(t); len(dls) != 0 {
		t.Errorf("%d dead letters of a task deleted before its routing, want 0", len(dls))
	}
}

// An ordered task whose worker dies in its last attempt reaches its max
// deliveries with no record written: the router routes it from the
// advisory, as it does a task of a work subject (the partition consumer's
// name, which depends on the partition count, is checked against the slot
// subject), and a replay sends it back to its key's slot.
func TestDeadLetterRouterRoutesOrderedTasks(t *testing.T) {
	t.Parallel()
	const typ = "dlq.ordered.crash"
	e := newEnv(t)
	ordering := framework.WithOrdering(framework.Ordering{Partitions: 4})
	crashed := dieInLastAttempt(t, e, typ, framework.WithMaxAttempts(2), framework.WithAckWait(300*time.Millisecond), ordering)
	info := e.enqueue(t, typ, "payload", framework.WithID("ord-crash-1"), framework.Ordered("k1"))
	testutil.Recv(t, crashed, waitLong, "last attempt")

	ran := make(chan string, 1)
	rw := e.worker(t)
	rw.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		ran <- task.ID
		return nil
	}, framework.WithMaxAttempts(2), framework.WithAckWait(300*time.Millisecond), ordering)
	startWorker(t, rw)

	d := e.waitDeadLetters(t, 1)[0]
	if d.RoutedBy != "router" || d.Reason != dlq.ReasonMaxDeliveries || d.TaskID != "ord-crash-1" ||
		d.OriginalSeq != info.Sequence || d.Type != typ {
		t.Errorf("record %+v", d)
	}
	testutil.Wait(t, waitLong, "task removed from the task stream", func() bool { return e.taskStreamMsgs(t) == 0 })
	rinfo, err := dlq.New(e.cl).Replay(t.Context(), d.Seq)
	if err != nil {
		t.Fatal(err)
	}
	if rinfo.Subject != info.Subject {
		t.Errorf("replayed to %s, want the key's slot %s", rinfo.Subject, info.Subject)
	}
	// An ordered task's replay runs under the replay's ID (see dlq.Replay).
	if id := testutil.Recv(t, ran, waitLong, "the replayed task"); id != rinfo.ID {
		t.Errorf("ran %s, want %s", id, rinfo.ID)
	}
}

// A dead count a producer wrote in the task's headers does not wrap the
// record's count to a negative number.
func TestDeadLetterCountFromTheWireDoesNotWrap(t *testing.T) {
	t.Parallel()
	const typ = "dlq.deadcount"
	e := newEnv(t)
	w := e.worker(t)
	w.HandleFunc(typ, func(context.Context, *framework.Task) error { return framework.Permanent(errors.New("no")) })
	startWorker(t, w)
	e.publishRaw(t, "jetflow.task.normal."+typ, nats.Header{dlq.HeaderDeadCount: {strconv.Itoa(math.MaxInt)}}, []byte("{}"))
	if d := e.waitDeadLetters(t, 1)[0]; d.DeadCount != math.MaxInt {
		t.Errorf("dead count %d, want %d", d.DeadCount, math.MaxInt)
	}
}

// The reconciler finds ordered tasks whose max-deliveries advisory was
// lost, as it does the tasks of work subjects: their partition consumers
// read slot subjects.
func TestDeadLetterReconcilerRoutesOrderedTasks(t *testing.T) {
	t.Parallel()
	const typ, n = "dlq.ordered.lost", 3
	e := newEnv(t)
	w := e.worker(t, framework.WithDeadLetters(false))
	w.HandleFunc(typ, func(context.Context, *framework.Task) error { return errBoom },
		framework.WithMaxAttempts(2), dlqFast, framework.WithOrdering(framework.Ordering{Partitions: 2}))
	startWorker(t, w)
	want := make(map[uint64]bool)
	for i := range n {
		want[e.enqueue(t, typ, i, framework.Ordered("key-"+strconv.Itoa(i))).Sequence] = true
	}
	testutil.Wait(t, waitLong, "max-deliveries advisories", func() bool { return e.maxDeliveryAdvisories(t) >= n })
	e.purgeAdvisories(t)
	if routed, err := dlq.New(e.cl).Reconcile(t.Context()); err != nil || routed != n {
		t.Fatalf("Reconcile = %d, %v; want %d", routed, err, n)
	}
	for _, d := range e.deadLetters(t) {
		if !want[d.OriginalSeq] || d.RoutedBy != "reconciler" || d.Type != typ || d.Deliveries != 2 {
			t.Errorf("record %+v", d)
		}
	}
	if got := e.taskStreamMsgs(t); got != 0 {
		t.Errorf("task stream holds %d messages, want 0", got)
	}
}

// An advisory can name a task that is truly dead and still lie about how
// often it was delivered: the record counts at most the consumer's
// MaxDeliver.
func TestDeadLetterDeliveriesFromTheAdvisoryAreBounded(t *testing.T) {
	t.Parallel()
	const typ = "dlq.deliveries.forged"
	e := newEnv(t)
	dead := dieWithoutDeadLetters(t, e, typ, 1)[0]
	// The server's advisory goes; a forged one with a huge count takes its
	// place.
	e.purgeAdvisories(t)
	e.forgeMaxDeliveries(t, typ, dead.Sequence, 1<<62)
	router := e.worker(t)
	router.HandleFunc("dlq.deliveries.other", func(context.Context, *framework.Task) error { return nil })
	startWorker(t, router)
	if d := e.waitDeadLetters(t, 1)[0]; d.OriginalSeq != dead.Sequence || d.RoutedBy != "router" || d.Deliveries != 2 {
		t.Errorf("record %+v, want the task's, routed by the router, with 2 deliveries (its MaxDeliver)", d)
	}
}
