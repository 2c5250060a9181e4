package framework_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// dlqFast retries at once, so that tasks die quickly.
var dlqFast = framework.WithBackoff(framework.BackoffPolicy{Initial: 5 * time.Millisecond, Randomization: -1})

var dlqNames = streams.MustNames("")

// dlqStreamMsgs returns the number of messages in stream name.
func (e *env) dlqStreamMsgs(t *testing.T, name string, subject string) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := e.js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	if subject == "" {
		si, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s info: %v", name, err)
		}
		return si.State.Msgs
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatalf("stream %s info: %v", name, err)
	}
	var n uint64
	for _, c := range si.State.Subjects {
		n += c
	}
	return n
}

// deadLetters returns every record, oldest first.
func (e *env) deadLetters(t *testing.T) []dlq.Record {
	t.Helper()
	var all []dlq.Record
	var after uint64
	for {
		page, next, err := dlq.New(e.cl).List(t.Context(), dlq.Filter{}, dlq.Page{After: after, Limit: 1000})
		if err != nil {
			t.Fatalf("list dead letters: %v", err)
		}
		all = append(all, page...)
		if next == 0 {
			return all
		}
		after = next
	}
}

// waitDeadLetters waits until the dead-letter stream holds n records and
// returns them.
func (e *env) waitDeadLetters(t *testing.T, n int) []dlq.Record {
	t.Helper()
	testutil.Wait(t, waitLong, fmt.Sprintf("%d dead letters", n), func() bool {
		return e.dlqStreamMsgs(t, dlqNames.DLQStream(), "") >= uint64(n)
	})
	got := e.deadLetters(t)
	if len(got) != n {
		t.Fatalf("%d dead letters, want %d", len(got), n)
	}
	return got
}

// maxDeliveryAdvisories counts the captured max-deliveries advisories.
func (e *env) maxDeliveryAdvisories(t *testing.T) uint64 {
	return e.dlqStreamMsgs(t, dlqNames.AdvisoryStream(),
		"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."+dlqNames.TaskStream()+".>")
}

// routerIdle waits until the router consumer has handled every advisory.
func (e *env) waitRouterIdle(t *testing.T) {
	t.Helper()
	testutil.Wait(t, waitLong, "dead-letter router idle", func() bool {
		c, err := e.js.Consumer(t.Context(), dlqNames.AdvisoryStream(), "dlq-router")
		if err != nil {
			return false
		}
		ci, err := c.Info(t.Context())
		return err == nil && ci.NumPending == 0 && ci.NumAckPending == 0
	})
}

// checkUniqueOrigins fails when two records come from the same task.
func checkUniqueOrigins(t *testing.T, dls []dlq.Record) {
	t.Helper()
	seen := make(map[uint64]bool)
	for _, d := range dls {
		if seen[d.OriginalSeq] {
			t.Errorf("task seq %d dead-lettered twice", d.OriginalSeq)
		}
		seen[d.OriginalSeq] = true
	}
}

func noopHandler(context.Context, *framework.Task) error { return nil }

// (1) A task that always fails is in the DLQ after exactly MaxDeliver
// attempts, with its last error, and gone from the task stream.
func TestDeadLetterAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	const typ = "dlq.always"
	e := newEnv(t)
	w := e.worker(t)
	var attempts atomic.Int32
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		attempts.Add(1)
		return fmt.Errorf("boom %d\nsecond line", task.Attempt)
	}, framework.WithMaxAttempts(3), dlqFast)
	startWorker(t, w)
	before := time.Now()
	info := e.enqueue(t, typ, map[string]int{"n": 7}, framework.WithID("always-1"),
		framework.WithPriority(framework.PriorityHigh), framework.WithHeader("X-Tenant", "acme"))

	d := e.waitDeadLetters(t, 1)[0]
	ci := e.waitSettled(t, typ, framework.PriorityHigh)
	if ci.Delivered.Consumer != 3 || attempts.Load() != 3 {
		t.Errorf("delivered %d times, handler ran %d times; want 3", ci.Delivered.Consumer, attempts.Load())
	}
	testutil.Wait(t, waitLong, "tasks removed from the task stream", func() bool { return e.taskStreamMsgs(t) == 0 })
	if d.Subject != "jetflow.dlq."+typ || d.TaskID != "always-1" || d.Type != typ || d.Priority != framework.PriorityHigh {
		t.Errorf("record identity: %+v", d)
	}
	if d.Reason != dlq.ReasonMaxDeliveries || d.Deliveries != 3 || d.RoutedBy != "worker" || d.DeadCount != 1 {
		t.Errorf("reason %q deliveries %d routed by %q dead count %d", d.Reason, d.Deliveries, d.RoutedBy, d.DeadCount)
	}
	if d.LastError != "boom 3 second line" || d.LastErrorAttempt != 3 {
		t.Errorf("last error %q of attempt %d, want %q of 3", d.LastError, d.LastErrorAttempt, "boom 3 second line")
	}
	if d.OriginalSeq != info.Sequence || d.OriginalSubject != "jetflow.task.high."+typ {
		t.Errorf("origin %s #%d, want %s #%d", d.OriginalSubject, d.OriginalSeq, info.Subject, info.Sequence)
	}
	if d.FirstFailure.Before(before) || d.LastFailure.Before(d.FirstFailure) || d.DeadAt.Before(d.LastFailure) {
		t.Errorf("times: first %v last %v dead %v (enqueued after %v)", d.FirstFailure, d.LastFailure, d.DeadAt, before)
	}
	if d.FirstFailure.Equal(d.LastFailure) {
		t.Errorf("first failure %v equals the last: the first attempt's failure was not recorded", d.FirstFailure)
	}
	if string(d.Payload) != `{"n":7}` || d.Headers.Get("X-Tenant") != "acme" {
		t.Errorf("payload %q, X-Tenant %q", d.Payload, d.Headers.Get("X-Tenant"))
	}
	if id := d.Headers.Get("Nats-Msg-Id"); id != fmt.Sprintf("dlq-JETFLOW_TASKS-%d", info.Sequence) {
		t.Errorf("record's Nats-Msg-Id %q, want the dedup ID of task seq %d", id, info.Sequence)
	}
}

// Permanent and undecodable tasks go to the DLQ at once, with their reason.
func TestDeadLetterReasons(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	w.HandleFunc("dlq.permanent", func(context.Context, *framework.Task) error {
		return framework.Permanent(errors.New("card declined"))
	}, framework.WithMaxAttempts(5))
	framework.Handle(w, "dlq.decode", func(context.Context, *framework.Task, struct{ N int }) error { return nil },
		framework.WithMaxAttempts(5))
	startWorker(t, w)
	e.enqueue(t, "dlq.permanent", "x", framework.WithID("perm-1"))
	e.enqueue(t, "dlq.decode", []byte("not json"), framework.WithID("dec-1"))
	got := make(map[string]dlq.Record)
	for _, d := range e.waitDeadLetters(t, 2) {
		got[d.TaskID] = d
	}
	p, d := got["perm-1"], got["dec-1"]
	if p.Reason != dlq.ReasonPermanent || p.Deliveries != 1 || !strings.Contains(p.LastError, "card declined") {
		t.Errorf("permanent: reason %q deliveries %d error %q", p.Reason, p.Deliveries, p.LastError)
	}
	if d.Reason != dlq.ReasonDecode || d.Deliveries != 1 || d.Headers.Get(framework.HeaderEncoding) != "raw" ||
		string(d.Payload) != "not json" {
		t.Errorf("decode: reason %q deliveries %d encoding %q payload %q", d.Reason, d.Deliveries,
			d.Headers.Get(framework.HeaderEncoding), d.Payload)
	}
	testutil.Wait(t, waitLong, "tasks removed from the task stream", func() bool { return e.taskStreamMsgs(t) == 0 })
}

// (2) A worker that loses its connection on the last attempt cannot
// dead-letter the task itself. The server notices the max deliveries when it
// would redeliver the task after the ack wait, that is once a worker pulls
// the type again (here: the replacement worker), emits the advisory, and the
// router of that worker routes the task, with the last error recorded before
// the fault.
func TestDeadLetterAfterWorkerLosesConnection(t *testing.T) {
	t.Parallel()
	const typ = "dlq.crash"
	e := newEnv(t)
	crashed := dieInLastAttempt(t, e, typ, framework.WithMaxAttempts(3), framework.WithAckWait(300*time.Millisecond))
	info := e.enqueue(t, typ, "payload", framework.WithID("crash-1"))
	testutil.Recv(t, crashed, waitLong, "last attempt")

	// The replacement worker serves the type (and runs a router).
	rw := e.worker(t)
	rw.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		t.Errorf("attempt %d delivered after the last one", task.Attempt)
		return nil
	}, framework.WithMaxAttempts(3), framework.WithAckWait(300*time.Millisecond))
	startWorker(t, rw)

	d := e.waitDeadLetters(t, 1)[0]
	if d.RoutedBy != "router" || d.Reason != dlq.ReasonMaxDeliveries || d.Deliveries != 3 {
		t.Errorf("routed by %q, reason %q, deliveries %d", d.RoutedBy, d.Reason, d.Deliveries)
	}
	if d.LastError != "boom 2" || d.LastErrorAttempt != 2 {
		t.Errorf("last error %q of attempt %d, want \"boom 2\" of 2", d.LastError, d.LastErrorAttempt)
	}
	if d.FirstFailure.IsZero() || !d.FirstFailure.Before(d.LastFailure) {
		t.Errorf("first failure %v, last failure %v", d.FirstFailure, d.LastFailure)
	}
	if d.TaskID != "crash-1" || d.OriginalSeq != info.Sequence || string(d.Payload) != `"payload"` {
		t.Errorf("record %+v", d)
	}
	testutil.Wait(t, waitLong, "task removed from the task stream", func() bool { return e.taskStreamMsgs(t) == 0 })
	e.waitRouterIdle(t)
	if n := len(e.deadLetters(t)); n != 1 {
		t.Errorf("%d dead letters, want 1", n)
	}
}

// dieInLastAttempt starts a worker without a router that serves typ with
// opts: its attempts fail with "boom <attempt>", and in the last one the
// worker dies (its connection closes), so no record is written. The channel
// closes then.
func dieInLastAttempt(t *testing.T, e *env, typ string, opts ...framework.HandlerOption) <-chan struct{} {
	t.Helper()
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, framework.WithDeadLetterRouter(false))
	if err != nil {
		t.Fatal(err)
	}
	crashed := make(chan struct{})
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		if task.Attempt == task.MaxAttempts {
			nc.Close() // the worker dies mid-task
			close(crashed)
			return errors.New("never recorded")
		}
		return fmt.Errorf("boom %d", task.Attempt)
	}, append([]framework.HandlerOption{dlqFast}, opts...)...)
	startWorker(t, w)
	return crashed
}

// dieWithoutDeadLetters makes n tasks of typ reach their max deliveries in a
// worker that does not dead-letter (nor route): they stay in the task
// stream, and their advisories wait in the advisory stream.
func dieWithoutDeadLetters(t *testing.T, e *env, typ string, n int) []framework.TaskInfo {
	t.Helper()
	w := e.worker(t, framework.WithDeadLetters(false))
	w.HandleFunc(typ, func(context.Context, *framework.Task) error { return errBoom },
		framework.WithMaxAttempts(2), dlqFast)
	startWorker(t, w)
	infos := make([]framework.TaskInfo, n)
	for i := range infos {
		infos[i] = e.enqueue(t, typ, i)
	}
	testutil.Wait(t, waitLong, "max-deliveries advisories", func() bool { return e.maxDeliveryAdvisories(t) >= uint64(n) })
	if got := e.dlqStreamMsgs(t, dlqNames.DLQStream(), ""); got != 0 {
		t.Fatalf("%d dead letters before any router ran", got)
	}
	if got := e.taskStreamMsgs(t); got != uint64(n) {
		t.Fatalf("task stream holds %d messages, want the %d dead tasks", got, n)
	}
	return infos
}

// (3a) Tasks that die while no router runs wait in the task stream; a
// router that starts later routes every one of them once, while its
// reconciler finds them too.
func TestDeadLetterRouterCatchesUp(t *testing.T) {
	t.Parallel()
	const n = 20
	e := newEnv(t)
	dieWithoutDeadLetters(t, e, "dlq.offline", n)

	w := e.worker(t, framework.WithTimings(framework.Timings{ReconcileInterval: 100 * time.Millisecond}))
	w.HandleFunc("dlq.other", noopHandler)
	startWorker(t, w)

	e.waitDeadLetters(t, n)
	testutil.Wait(t, waitLong, "task stream empty", func() bool { return e.taskStreamMsgs(t) == 0 })
	e.waitRouterIdle(t)
	if routed, err := dlq.New(e.cl).Reconcile(t.Context()); err != nil || routed != 0 {
		t.Errorf("Reconcile after the router = %d, %v; want 0", routed, err)
	}
	dls := e.deadLetters(t)
	if len(dls) != n {
		t.Fatalf("%d dead letters, want %d", len(dls), n)
	}
	checkUniqueOrigins(t, dls)
	for _, d := range dls {
		if d.Reason != dlq.ReasonMaxDeliveries || d.Deliveries != 2 {
			t.Errorf("record %d: reason %q deliveries %d", d.Seq, d.Reason, d.Deliveries)
		}
	}
}

// (3b) When the advisories are lost, the reconciler finds the dead tasks:
// all of them, once.
func TestDeadLetterReconcilerRoutesLostAdvisories(t *testing.T) {
	t.Parallel()
	const n = 15
	e := newEnv(t)
	infos := dieWithoutDeadLetters(t, e, "dlq.lost", n)
	e.purgeAdvisories(t)

	dl := dlq.New(e.cl)
	routed, err := dl.Reconcile(t.Context())
	if err != nil || routed != n {
		t.Fatalf("Reconcile = %d, %v; want %d", routed, err, n)
	}
	if routed, err := dl.Reconcile(t.Context()); err != nil || routed != 0 {
		t.Errorf("second Reconcile = %d, %v; want 0", routed, err)
	}
	dls := e.deadLetters(t)
	if len(dls) != n {
		t.Fatalf("%d dead letters, want %d", len(dls), n)
	}
	checkUniqueOrigins(t, dls)
	want := make(map[uint64]bool)
	for _, in := range infos {
		want[in.Sequence] = true
	}
	for _, d := range dls {
		if !want[d.OriginalSeq] || d.RoutedBy != "reconciler" || d.Deliveries != 2 || d.Reason != dlq.ReasonMaxDeliveries {
			t.Errorf("record %+v", d)
		}
	}
	if got := e.taskStreamMsgs(t); got != 0 {
		t.Errorf("task stream holds %d messages, want 0", got)
	}
}

// The reconciler (and a worker running it every 100 ms) never takes a task
// that is running or waiting: dead tasks behind a running one are routed
// once it finished.
func TestDeadLetterReconcilerLeavesLiveTasks(t *testing.T) {
	t.Parallel()
	const typ = "dlq.mixed"
	e := newEnv(t)
	release := make(chan struct{})
	var blockedRuns atomic.Int32
	w := e.worker(t, framework.WithDeadLetters(false))
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		if string(task.Payload) == `"block"` {
			blockedRuns.Add(1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return errBoom
	}, framework.WithMaxAttempts(2), dlqFast)
	startWorker(t, w)
	// Waiting tasks: a consumer nobody pulls from.
	if _, err := topology.EnsureConsumer(t.Context(), e.js, dlqNames, topology.ConsumerSpec{TaskType: "dlq.idle"}); err != nil {
		t.Fatal(err)
	}
	e.enqueue(t, "dlq.idle", 1)
	e.enqueue(t, "dlq.idle", 2)
	e.enqueue(t, typ, "block")
	testutil.Wait(t, waitLong, "blocking task running", func() bool { return blockedRuns.Load() == 1 })
	for i := range 3 {
		e.enqueue(t, typ, i)
	}
	testutil.Wait(t, waitLong, "3 advisories", func() bool { return e.maxDeliveryAdvisories(t) >= 3 })
	e.purgeAdvisories(t)
	// A router-enabled worker reconciling every 100 ms, besides explicit calls.
	rw := e.worker(t, framework.WithTimings(framework.Timings{ReconcileInterval: 100 * time.Millisecond}))
	rw.HandleFunc("dlq.other", noopHandler)
	startWorker(t, rw)

	dl := dlq.New(e.cl)
	if routed, err := dl.Reconcile(t.Context()); err != nil || routed != 0 {
		t.Fatalf("Reconcile with a task running = %d, %v; want 0", routed, err)
	}
	if n := e.taskStreamMsgs(t); n != 6 {
		t.Fatalf("task stream holds %d messages, want 6 (2 waiting, 1 running, 3 dead)", n)
	}
	if got := e.dlqStreamMsgs(t, dlqNames.DLQStream(), ""); got != 0 {
		t.Fatalf("%d dead letters while a task runs before the dead ones", got)
	}
	close(release)
	e.waitSettled(t, typ, framework.PriorityNormal)
	dls := e.waitDeadLetters(t, 3)
	checkUniqueOrigins(t, dls)
	if routed, err := dl.Reconcile(t.Context()); err != nil || routed != 0 {
		t.Errorf("Reconcile after the worker's reconciler = %d, %v; want 0", routed, err)
	}
	if n := e.taskStreamMsgs(t); n != 2 {
		t.Errorf("task stream holds %d messages, want the 2 waiting ones", n)
	}
	if n := blockedRuns.Load(); n != 1 {
		t.Errorf("blocking task ran %d times, want 1", n)
	}
	if n := len(e.deadLetters(t)); n != 3 {
		t.Errorf("%d dead letters, want 3", n)
	}
}

// Dead tasks below the ack floor of a busy consumer are routed while a task
// of the same consumer runs. (On nats-server 2.15 a max-delivered task does
// not move the ack floor; the next acknowledgement moves it past.)
func TestDeadLetterReconcilerBelowAckFloor(t *testing.T) {
	t.Parallel()
	const typ = "dlq.floor"
	e := newEnv(t)
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	acked := make(chan struct{}, 1)
	w := e.worker(t, framework.WithDeadLetters(false))
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		switch string(task.Payload) {
		case `"ok"`:
			acked <- struct{}{}
			return nil
		case `"block"`:
			running <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return errBoom
	}, framework.WithMaxAttempts(2), dlqFast)
	startWorker(t, w)
	dead := make(map[uint64]bool)
	for i := range 3 {
		dead[e.enqueue(t, typ, i).Sequence] = true
	}
	testutil.Wait(t, waitLong, "3 advisories", func() bool { return e.maxDeliveryAdvisories(t) >= 3 })
	e.purgeAdvisories(t)
	e.enqueue(t, typ, "ok")
	testutil.Recv(t, acked, waitLong, "ok task")
	okSettled := e.waitSettled(t, typ, framework.PriorityNormal)
	block := e.enqueue(t, typ, "block")
	testutil.Recv(t, running, waitLong, "blocking task running")
	ci := e.consumerInfo(t, typ, framework.PriorityNormal)
	if ci.NumAckPending != 1 || ci.AckFloor.Stream < okSettled.Delivered.Stream || ci.AckFloor.Stream >= block.Sequence {
		t.Fatalf("consumer: %d pending, ack floor %d; want 1 pending and the floor past the dead tasks (≥ %d) below the running one (%d)",
			ci.NumAckPending, ci.AckFloor.Stream, okSettled.Delivered.Stream, block.Sequence)
	}

	routed, err := dlq.New(e.cl).Reconcile(t.Context())
	if err != nil || routed != 3 {
		t.Fatalf("Reconcile = %d, %v; want 3", routed, err)
	}
	for _, d := range e.deadLetters(t) {
		if !dead[d.OriginalSeq] {
			t.Errorf("record of task seq %d, not a dead one", d.OriginalSeq)
		}
	}
	if n := e.taskStreamMsgs(t); n != 1 {
		t.Errorf("task stream holds %d messages, want the running one", n)
	}
	close(release)
	e.waitSettled(t, typ, framework.PriorityNormal)
	testutil.Wait(t, waitLong, "task stream empty", func() bool { return e.taskStreamMsgs(t) == 0 })
}

// replayRun is what a handler saw of a replayed task.
type replayRun struct {
	id, payload, tenant, fromSeq, deadCount, prevErr string
	attempt                                          int
	prio                                             framework.Priority
}

// (4) Replay round trip: the replayed task has the same ID, payload,
// priority and headers, attempts start over, its history is in headers; a
// task dying again gets a record with the history; replaying a record twice
// enqueues it once.
func TestDeadLetterReplayRoundTrip(t *testing.T) {
	t.Parallel()
	const typ = "dlq.replay"
	e := newEnv(t)
	w := e.worker(t)
	var runs atomic.Int32
	ok := make(chan replayRun, 4)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		if runs.Add(1) <= 2 {
			return framework.Permanent(fmt.Errorf("rejected (run %d)", runs.Load()))
		}
		ok <- replayRun{id: task.ID, payload: string(task.Payload), tenant: task.Header("X-Tenant"),
			fromSeq: task.Header(dlq.HeaderReplayedFromSeq), deadCount: task.Header(dlq.HeaderDeadCount),
			prevErr: task.Header(dlq.HeaderPreviousError), attempt: task.Attempt, prio: task.Priority}
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, typ, map[string]string{"k": "v"}, framework.WithID("rp-1"),
		framework.WithPriority(framework.PriorityCritical), framework.WithHeader("X-Tenant", "acme"))
	first := e.waitDeadLetters(t, 1)[0]
	dl := dlq.New(e.cl)

	info, err := dl.Replay(t.Context(), first.Seq)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if info.ID != "rp-1" || info.Priority != framework.PriorityCritical || info.Duplicate ||
		info.Subject != "jetflow.task.critical."+typ {
		t.Errorf("replay info %+v", info)
	}
	if _, err := dl.Replay(t.Context(), first.Seq); !errors.Is(err, framework.ErrNotFound) {
		t.Errorf("second replay of record %d: %v, want ErrNotFound", first.Seq, err)
	}
	// The replay dies again: a second record, carrying the history.
	second := e.waitDeadLetters(t, 1)[0]
	if second.Seq == first.Seq || second.DeadCount != 2 || second.TaskID != "rp-1" ||
		second.Headers.Get(dlq.HeaderReplayedFromSeq) != strconv.FormatUint(first.Seq, 10) ||
		second.Headers.Get(dlq.HeaderPreviousError) != first.LastError || second.Deliveries != 1 {
		t.Errorf("second record: seq %d dead count %d replayed from %q previous error %q deliveries %d",
			second.Seq, second.DeadCount, second.Headers.Get(dlq.HeaderReplayedFromSeq),
			second.Headers.Get(dlq.HeaderPreviousError), second.Deliveries)
	}
	if _, err := dl.Replay(t.Context(), second.Seq); err != nil {
		t.Fatalf("replay of the second record: %v", err)
	}
	got := testutil.Recv(t, ok, waitLong, "replayed task succeeded")
	want := replayRun{id: "rp-1", payload: `{"k":"v"}`, tenant: "acme", fromSeq: strconv.FormatUint(second.Seq, 10),
		deadCount: "2", prevErr: second.LastError, attempt: 1, prio: framework.PriorityCritical}
	if got != want {
		t.Errorf("replayed task saw %+v, want %+v", got, want)
	}
	e.waitSettled(t, typ, framework.PriorityCritical)
	if n := runs.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 3", n)
	}
	if n := e.dlqStreamMsgs(t, dlqNames.DLQStream(), ""); n != 0 {
		t.Errorf("%d dead letters left, want 0", n)
	}
}

// A task of an unordered type whose producer gave it an ordering key header
// (published by hand on its work subject) replays to its work subject, where
// its workers read, not to the slot subject the header names, where none
// does.
func TestDeadLetterReplayIgnoresForgedOrderingKey(t *testing.T) {
	t.Parallel()
	const typ = "dlq.forged.key"
	e := newEnv(t)
	w := e.worker(t)
	var runs atomic.Int32
	replayed := make(chan string, 1)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		if runs.Add(1) == 1 {
			return framework.Permanent(errors.New("rejected"))
		}
		replayed <- task.ID
		return nil
	})
	startWorker(t, w)
	e.publishRaw(t, "jetflow.task.normal."+typ, nats.Header{jetstream.MsgIDHeader: {"forged-1"}, framework.HeaderTaskID: {"forged-1"}, framework.HeaderOrderingKey: {"k"}}, []byte("{}"))
	rec := e.waitDeadLetters(t, 1)[0]
	info, err := dlq.New(e.cl).Replay(t.Context(), rec.Seq)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if info.Subject != "jetflow.task.normal."+typ {
		t.Errorf("replayed to %s, want the task's work subject", info.Subject)
	}
	if id := testutil.Recv(t, replayed, waitLong, "the replayed task"); id != "forged-1" {
		t.Errorf("replayed task %s", id)
	}
}

// Replays racing each other enqueue the task once.
func TestDeadLetterConcurrentReplaysEnqueueOnce(t *testing.T) {
	t.Parallel()
	const typ = "dlq.race"
	e := newEnv(t)
	var healthy atomic.Bool
	var succeeded atomic.Int32
	w := e.worker(t)
	w.HandleFunc(typ, func(context.Context, *framework.Task) error {
		if !healthy.Load() {
			return framework.Permanent(errBoom)
		}
		succeeded.Add(1)
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("race-1"))
	rec := e.waitDeadLetters(t, 1)[0]
	healthy.Store(true)
	const callers = 4
	var wg sync.WaitGroup
	errs := make([]error, callers)
	infos := make([]framework.TaskInfo, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			infos[i], errs[i] = dlq.New(e.cl).Replay(t.Context(), rec.Seq)
		}()
	}
	wg.Wait()
	fresh := 0
	for i, err := range errs {
		switch {
		case err == nil && !infos[i].Duplicate:
			fresh++
		case err == nil, errors.Is(err, framework.ErrNotFound):
		default:
			t.Errorf("replay %d: %v", i, err)
		}
	}
	if fresh != 1 {
		t.Errorf("%d replays enqueued a new task, want 1 (%v)", fresh, errs)
	}
	// The replayed task runs; only then is "settled" about it (the consumer
	// may not count a message stored a moment ago).
	testutil.Wait(t, waitLong, "the replayed task succeeded", func() bool { return succeeded.Load() >= 1 })
	ci := e.waitSettled(t, typ, framework.PriorityNormal)
	if ci.Delivered.Consumer != 2 || succeeded.Load() != 1 {
		t.Errorf("delivered %d times (want 2: the original and one replay), succeeded %d times", ci.Delivered.Consumer, succeeded.Load())
	}
}

// List filters and pages; Purge by type, by error text; Get.
func TestDeadLetterListFilterPurge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	fail := func(_ context.Context, task *framework.Task) error {
		return framework.Permanent(fmt.Errorf("%s failure %s", task.Type, task.Payload))
	}
	w.HandleFunc("dlq.alpha", fail)
	w.HandleFunc("dlq.beta", fail)
	startWorker(t, w)
	for i := range 5 {
		e.enqueue(t, "dlq.alpha", i)
	}
	e.waitDeadLetters(t, 5)
	mid := time.Now()
	for i := range 5 {
		e.enqueue(t, "dlq.beta", i)
	}
	all := e.waitDeadLetters(t, 10)
	dl := dlq.New(e.cl)
	ctx := t.Context()

	// Pages of 3: 3, 3, 3, 1, in order, each record once.
	var paged []uint64
	var after uint64
	pages := 0
	for {
		page, next, err := dl.List(ctx, dlq.Filter{}, dlq.Page{Limit: 3, After: after})
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, d := range page {
			paged = append(paged, d.Seq)
		}
		if next == 0 {
			break
		}
		if len(page) != 3 || next != page[2].Seq {
			t.Fatalf("page %d: %d records, next %d", pages, len(page), next)
		}
		after = next
	}
	var want []uint64
	for _, d := range all {
		want = append(want, d.Seq)
	}
	if pages != 4 || !slices.Equal(paged, want) || !slices.IsSorted(paged) {
		t.Errorf("%d pages of %v, want 4 pages of %v", pages, paged, want)
	}

	count := func(f dlq.Filter) []dlq.Record {
		t.Helper()
		got, next, err := dl.List(ctx, f, dlq.Page{})
		if err != nil || next != 0 {
			t.Fatalf("list %+v: next %d, %v", f, next, err)
		}
		return got
	}
	cases := []struct {
		name string
		f    dlq.Filter
		want int
	}{
		{"type", dlq.Filter{Type: "dlq.alpha"}, 5},
		{"error text, any case", dlq.Filter{ErrorContains: "BETA FAILURE 3"}, 1},
		{"from", dlq.Filter{From: mid}, 5},
		{"to", dlq.Filter{To: mid}, 5},
		{"type and from", dlq.Filter{Type: "dlq.alpha", From: mid}, 0},
		{"reason", dlq.Filter{Reason: dlq.ReasonPermanent}, 10},
		{"other reason", dlq.Filter{Reason: dlq.ReasonMaxDeliveries}, 0},
		{"unknown type", dlq.Filter{Type: "dlq.none"}, 0},
	}
	for _, c := range cases {
		if got := count(c.f); len(got) != c.want {
			t.Errorf("%s: %d records, want %d", c.name, len(got), c.want)
		}
	}
	for _, d := range count(dlq.Filter{From: mid}) {
		if d.Type != "dlq.beta" {
			t.Errorf("from %v: record of type %s", mid, d.Type)
		}
	}
	if _, _, err := dl.List(ctx, dlq.Filter{Type: "Bad Type"}, dlq.Page{}); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("invalid type filter: %v", err)
	}

	got, err := dl.Get(ctx, all[0].Seq)
	if err != nil || got.Seq != all[0].Seq || got.LastError != all[0].LastError {
		t.Errorf("Get(%d) = %+v, %v", all[0].Seq, got, err)
	}
	if _, err := dl.Get(ctx, 1_000_000); !errors.Is(err, framework.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}

	if n, err := dl.Purge(ctx, dlq.Filter{ErrorContains: "beta failure 1"}); err != nil || n != 1 {
		t.Errorf("purge by error = %d, %v; want 1", n, err)
	}
	if n, err := dl.Purge(ctx, dlq.Filter{Type: "dlq.alpha"}); err != nil || n != 5 {
		t.Errorf("purge by type = %d, %v; want 5", n, err)
	}
	left := e.deadLetters(t)
	if len(left) != 4 {
		t.Fatalf("%d records left, want 4", len(left))
	}
	for _, d := range left {
		if d.Type != "dlq.beta" || strings.HasSuffix(d.LastError, "failure 1") {
			t.Errorf("record left: %s %q", d.Type, d.LastError)
		}
	}
	if n, err := dl.Purge(ctx, dlq.Filter{}); err != nil || n != 4 {
		t.Errorf("purge all = %d, %v; want 4", n, err)
	}
}

// A bulk replay streams through the records with bounded memory, reports
// progress, replays each record once and leaves records that arrive during
// the replay.
func TestDeadLetterReplayAll(t *testing.T) {
	t.Parallel()
	const typ = "dlq.bulk"
	const n = 600 // more than two publish windows and two read batches
	e := newEnv(t)
	var healthy atomic.Bool
	var mu sync.Mutex
	seen := make(map[string]int)
	w := e.worker(t)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		if !healthy.Load() {
			return framework.Permanent(errBoom)
		}
		mu.Lock()
		seen[task.ID]++
		mu.Unlock()
		return nil
	})
	startWorker(t, w)
	jobs := make([]framework.TaskSpec, n)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: typ, Payload: i}
	}
	if _, err := e.cl.EnqueueMany(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}
	e.waitDeadLetters(t, n)
	healthy.Store(true)

	var calls [][2]int
	replayed, err := dlq.New(e.cl).ReplayAll(t.Context(), func(done, total int) {
		calls = append(calls, [2]int{done, total})
	})
	if err != nil || replayed != n {
		t.Fatalf("ReplayAll = %d, %v; want %d", replayed, err, n)
	}
	if len(calls) < 3 || calls[len(calls)-1] != [2]int{n, n} {
		t.Errorf("progress calls %v, want several ending with [%d %d]", calls, n, n)
	}
	for i := 1; i < len(calls); i++ {
		if calls[i][0] < calls[i-1][0] || calls[i][1] != n {
			t.Errorf("progress went %v then %v", calls[i-1], calls[i])
		}
	}
	// Replays reach the task stream when their schedules fire.
	testutil.Wait(t, waitLong, "every replayed task ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) >= n
	})
	e.waitSettled(t, typ, framework.PriorityNormal)
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != n {
		t.Errorf("%d distinct tasks replayed, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("task %s ran %d times", id, c)
		}
	}
	if left := e.dlqStreamMsgs(t, dlqNames.DLQStream(), ""); left != 0 {
		t.Errorf("%d records left", left)
	}
}

// A payload that fills the server's max payload leaves no room for the
// record's headers: the record keeps everything but the payload, and the
// task is not retried forever.
func TestDeadLetterOversizedPayload(t *testing.T) {
	t.Parallel()
	const limit = 4096
	e := newEnv(t, testutil.WithMaxPayload(limit))
	w := e.worker(t)
	w.HandleFunc("dlq.big", func(context.Context, *framework.Task) error { return framework.Permanent(errBoom) })
	startWorker(t, w)
	e.enqueue(t, "dlq.big", make([]byte, limit-300))
	d := e.waitDeadLetters(t, 1)[0]
	if !d.PayloadOmitted || len(d.Payload) != 0 || d.Headers.Get(dlq.HeaderPayloadOmitted) != strconv.Itoa(limit-300) {
		t.Errorf("omitted %v, payload %d bytes, header %q", d.PayloadOmitted, len(d.Payload), d.Headers.Get(dlq.HeaderPayloadOmitted))
	}
	if _, err := dlq.New(e.cl).Replay(t.Context(), d.Seq); err == nil {
		t.Error("replay of a record without payload succeeded")
	}
	testutil.Wait(t, waitLong, "tasks removed from the task stream", func() bool { return e.taskStreamMsgs(t) == 0 })
}

// With dead letters off, a permanent failure leaves no record.
func TestDeadLettersOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t, framework.WithDeadLetters(false))
	done := make(chan struct{}, 1)
	w.HandleFunc("dlq.off", func(context.Context, *framework.Task) error {
		done <- struct{}{}
		return framework.Permanent(errBoom)
	})
	startWorker(t, w)
	e.enqueue(t, "dlq.off", nil)
	testutil.Recv(t, done, waitLong, "handler")
	e.waitSettled(t, "dlq.off", framework.PriorityNormal)
	testutil.Wait(t, waitLong, "task removed", func() bool { return e.taskStreamMsgs(t) == 0 })
	if n := e.dlqStreamMsgs(t, dlqNames.DLQStream(), ""); n != 0 {
		t.Errorf("%d dead letters with dead letters off", n)
	}
	for _, opt := range []framework.WorkerOption{framework.WithTimings(framework.Timings{ReconcileInterval: 50 * time.Millisecond}), framework.WithTimings(framework.Timings{ErrorRetention: time.Second})} {
		if _, err := framework.NewWorker(e.nc, opt); !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("invalid option accepted: %v", err)
		}
	}
}

// A task fired by a repeating schedule that the router (not its worker)
// dead-letters keeps the tick's ID, like every other task keeps its own: a
// replay then runs under the same ID and idempotency key.
func TestDeadLetterRouterKeepsCronTaskID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var mu sync.Mutex
	seen := make(map[string]bool)
	w := e.worker(t, framework.WithDeadLetters(false))
	w.HandleFunc("dlq.cron", func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		seen[task.ID] = true
		mu.Unlock()
		return errBoom
	}, framework.WithMaxAttempts(1))
	startWorker(t, w)
	if _, err := schedule.New(e.cl).Register(t.Context(), schedule.Definition{Name: "dying", Spec: "@every 1s", Type: "dlq.cron"}); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "a tick ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) > 0
	})
	if err := schedule.New(e.cl).Remove(t.Context(), "dying"); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "max-deliveries advisory", func() bool { return e.maxDeliveryAdvisories(t) >= 1 })

	router := e.worker(t, framework.WithTimings(framework.Timings{ReconcileInterval: 100 * time.Millisecond}))
	router.HandleFunc("dlq.other", noopHandler)
	startWorker(t, router)
	testutil.Wait(t, waitLong, "a dead letter", func() bool {
		return e.dlqStreamMsgs(t, dlqNames.DLQStream(), "") >= 1
	})
	mu.Lock()
	defer mu.Unlock()
	for _, d := range e.deadLetters(t) {
		if !strings.HasPrefix(d.TaskID, "cron-dying-") || !seen[d.TaskID] {
			t.Errorf("dead letter %d has task ID %q, want the tick's ID the worker saw (%v)", d.Seq, d.TaskID, seen)
		}
	}
}

// purgeAdvisories empties the advisory stream: the advisories of dead tasks
// are lost, as when the stream was full or the router's server was down.
func (e *env) purgeAdvisories(t *testing.T) {
	t.Helper()
	adv, err := e.js.Stream(t.Context(), dlqNames.AdvisoryStream())
	if err != nil {
		t.Fatal(err)
	}
	if err := adv.Purge(t.Context()); err != nil {
		t.Fatal(err)
	}
}
