package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

type payment struct {
	Ref    string `json:"ref"`
	Amount int    `json:"amount"`
}

// payDef is order → paid (waits for "payment.confirmed.<order ID>") → ship,
// which reads the payment; ships counts ship's executions by run.
func payDef(ships *counter, opts ...workflow.StepOption) *workflow.Definition {
	def := workflow.New("pay")
	workflow.Step(def, "order", func(ctx context.Context, o order) (string, error) { return o.ID, nil })
	workflow.WaitEvent(def, "paid", func(ctx context.Context, o order) (string, error) {
		return "payment.confirmed." + o.ID, nil
	}, append([]workflow.StepOption{workflow.After("order")}, opts...)...)
	workflow.Step(def, "ship", func(ctx context.Context, o order) (string, error) {
		ships.inc(stepKey(ctx))
		p, err := workflow.Output[payment](ctx, "paid")
		if errors.Is(err, workflow.ErrEventTimeout) {
			return "timed out", nil
		}
		if err != nil {
			return "", err
		}
		return p.Ref, nil
	}, workflow.After("paid"))
	return def
}

func waiting(r *workflow.Run) bool { return r.Step("paid").State == workflow.StepWaiting }

func shipped(t *testing.T, r *workflow.Run) string {
	t.Helper()
	var out string
	if err := json.Unmarshal(r.Step("ship").Output, &out); err != nil {
		t.Fatalf("ship output %s: %v", r.Step("ship").Output, err)
	}
	return out
}

// TestWaitEventResumes: a run waits for its event with the key recorded in
// its document, holding no task, and an event resumes it with its payload.
func TestWaitEventResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ships := newCounter()
	def := payDef(ships)
	w, _ := e.worker(t, []*workflow.Definition{def})
	startWorker(t, w)
	c := e.client(t, def)

	id := start(t, c, "pay", order{ID: "o-42"})
	r := waitStatus(t, c, id, "paid waiting", waiting)
	if st := r.Step("paid"); st.EventKey != "payment.confirmed.o-42" || !st.Deadline.IsZero() || r.Status != workflow.RunRunning {
		t.Fatalf("waiting run: %s, step %+v", r.Status, st)
	}
	testutil.Wait(t, waitLong, "no task running", func() bool { return w.Stats().Running == 0 })
	info, err := c.Signal(t.Context(), "payment.confirmed.o-42", payment{Ref: "pay-1", Amount: 300})
	if err != nil {
		t.Fatalf("signal: %v", err)
	}
	if info.Seq == 0 || info.Subject != "jetflow.event.payment.confirmed.o-42" {
		t.Fatalf("event info %+v", info)
	}
	r = wait(t, c, id)
	if r.Status != workflow.RunCompleted || shipped(t, r) != "pay-1" {
		t.Fatalf("run %s (%s), ship %s", r.Status, r.Error, r.Step("ship").Output)
	}
	var p payment
	if err := json.Unmarshal(r.Step("paid").Output, &p); err != nil || p.Amount != 300 {
		t.Fatalf("paid output %s (%v)", r.Step("paid").Output, err)
	}
}

// TestWaitEventBeforeWait: an event published before the run waits for it
// (even before the run starts) is not lost: the wait finds it in the event
// stream. A plain publish on the documented subject is an event too.
func TestWaitEventBeforeWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ships := newCounter()
	def := payDef(ships)
	w, _ := e.worker(t, []*workflow.Definition{def})
	startWorker(t, w) // creates the event streams
	c := e.client(t, def)

	info, err := c.Signal(t.Context(), "payment.confirmed.early", payment{Ref: "early"})
	if err != nil {
		t.Fatalf("signal: %v", err)
	}
	if len(info.Waiting) != 0 {
		t.Fatalf("runs waiting before any started: %v", info.Waiting)
	}
	// A plain publish, as `nats pub` would.
	if err := e.nc.Publish("jetflow.event.payment.confirmed.raw", []byte(`{"ref":"raw"}`)); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "events routed to no run", func() bool {
		s, _ := workflow.EventRouterStats(w)
		return s.Unmatched == 2
	})
	for _, o := range []string{"early", "raw"} {
		id := start(t, c, "pay", order{ID: o})
		if r := wait(t, c, id); r.Status != workflow.RunCompleted || shipped(t, r) != o {
			t.Fatalf("run for %s: %s (%s), ship %s", o, r.Status, r.Error, r.Step("ship").Output)
		}
	}
}

// TestWaitEventOnce: the same event delivered twice, and again after the
// run resumed, resumes the run once.
func TestWaitEventOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ships := newCounter()
	def := payDef(ships)
	w, _ := e.worker(t, []*workflow.Definition{def})
	startWorker(t, w)
	c := e.client(t, def)

	id := start(t, c, "pay", order{ID: "dup"})
	waitStatus(t, c, id, "paid waiting", waiting)
	for i := 0; i < 2; i++ {
		if _, err := c.Signal(t.Context(), "payment.confirmed.dup", payment{Ref: "dup"}); err != nil {
			t.Fatal(err)
		}
	}
	r := wait(t, c, id)
	if r.Status != workflow.RunCompleted {
		t.Fatalf("run %s: %s", r.Status, r.Error)
	}
	paid := *r.Step("paid")
	if _, err := c.SignalRun(t.Context(), id, payment{Ref: "late"}); !errors.Is(err, workflow.ErrNotWaiting) {
		t.Fatalf("SignalRun of a completed run: %v, want ErrNotWaiting", err)
	}
	last, err := c.Signal(t.Context(), "payment.confirmed.dup", payment{Ref: "again"})
	if err != nil {
		t.Fatal(err)
	}
	routed(t, e, last.Seq)
	testutil.Wait(t, waitLong, "no task running", func() bool { return w.Stats().Running == 0 })
	r2, err := c.Status(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n := ships.get(id + "/ship"); n != 1 {
		t.Fatalf("ship ran %d times", n)
	}
	now := r2.Step("paid")
	if now.Completion != paid.Completion || !now.EndedAt.Equal(paid.EndedAt) || string(now.Output) != string(paid.Output) || !r2.UpdatedAt.Equal(r.UpdatedAt) {
		t.Fatalf("paid changed after the run resumed: %+v, was %+v", now, paid)
	}
}

// TestWaitEventCancel: cancelling a waiting run skips its waiting step and
// removes its wait: an event for its key then resumes nothing.
func TestWaitEventCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ships := newCounter()
	def := payDef(ships)
	c := e.run(t, def)
	id := start(t, c, "pay", order{ID: "gone"})
	waitStatus(t, c, id, "paid waiting", waiting)
	if err := c.Cancel(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	r, err := c.Status(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != workflow.RunCancelled {
		t.Fatalf("run %s", r.Status)
	}
	checkState(t, r, "paid", workflow.StepSkipped)
	info, err := c.Signal(t.Context(), "payment.confirmed.gone", payment{Ref: "late"})
	if err != nil || len(info.Waiting) != 0 {
		t.Fatalf("signal after the cancel: %+v, %v", info, err)
	}
	routed(t, e, info.Seq)
	if r, err := c.Status(t.Context(), id); err != nil || r.Status != workflow.RunCancelled || ships.get(id+"/ship") != 0 {
		t.Fatalf("after the event: %v %+v, ship ran %d times", err, r, ships.get(id+"/ship"))
	}
}

// routed waits until the event router acknowledged the events up to seq.
// (An event replaced by a later one of the same key before the router
// read it is never delivered: the event stream keeps the last per key.)
func routed(t *testing.T, e *env, seq uint64) {
	t.Helper()
	testutil.Wait(t, waitLong, "events routed", func() bool {
		c, err := e.js.Consumer(t.Context(), "JETFLOW_EVENTS", "router")
		if err != nil {
			return false
		}
		ci, err := c.Info(t.Context())
		return err == nil && ci.AckFloor.Stream >= seq && ci.NumAckPending == 0
	})
}

// TestWaitEventTimeout: a timeout either runs the steps after the wait,
// which see ErrEventTimeout, or fails the run.
func TestWaitEventTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ships := newCounter()
	cont := payDef(ships, workflow.Timeout(time.Second, workflow.TimeoutContinue))
	failDef := workflow.New("pay-or-fail")
	workflow.WaitEvent(failDef, "paid", func(ctx context.Context, o order) (string, error) { return "payment.confirmed.never", nil },
		workflow.Timeout(time.Second))
	workflow.Step(failDef, "ship", func(ctx context.Context, o order) (int, error) { return 1, nil }, workflow.After("paid"))
	c := e.run(t, cont, failDef)

	id := start(t, c, "pay", order{ID: "slow"})
	r := waitStatus(t, c, id, "paid waiting", waiting)
	deadline := r.Step("paid").Deadline
	if deadline.IsZero() {
		t.Fatalf("no deadline: %+v", r.Step("paid"))
	}
	r = wait(t, c, id)
	if r.Status != workflow.RunCompleted || shipped(t, r) != "timed out" || !r.Step("paid").TimedOut {
		t.Fatalf("run %s (%s), ship %s, paid %+v", r.Status, r.Error, r.Step("ship").Output, r.Step("paid"))
	}
	if r.Step("paid").EndedAt.Before(deadline) {
		t.Fatalf("timed out at %v, before the deadline %v", r.Step("paid").EndedAt, deadline)
	}

	id = start(t, c, "pay-or-fail", order{ID: "x"})
	r = wait(t, c, id)
	if r.Status != workflow.RunFailed || !strings.Contains(r.Error, "event timeout") {
		t.Fatalf("run %s: %q", r.Status, r.Error)
	}
	checkState(t, r, "paid", workflow.StepFailed)
	checkState(t, r, "ship", workflow.StepSkipped)
}

// TestWaitEventHoldsNothing: a thousand waiting runs hold no task and no
// goroutine in the worker. Not parallel: it counts the process's
// goroutines.
func TestWaitEventHoldsNothing(t *testing.T) {
	e := newEnv(t)
	def := workflow.New("idle")
	workflow.WaitEvent(def, "wait", func(ctx context.Context, n int) (string, error) {
		return "idle.k" + strconv.Itoa(n), nil
	})
	workflow.Step(def, "done", func(ctx context.Context, n int) (int, error) { return n, nil }, workflow.After("wait"))
	w, _ := e.worker(t, []*workflow.Definition{def})
	startWorker(t, w)
	c := e.client(t, def)

	first := start(t, c, "idle", 0)
	waitStatus(t, c, first, "first run waiting", func(r *workflow.Run) bool { return r.Step("wait").State == workflow.StepWaiting })
	testutil.Wait(t, waitLong, "no task running", func() bool { return w.Stats().Running == 0 })
	before := runtime.NumGoroutine()
	const runs = 1000
	for i := 1; i < runs; i++ {
		start(t, c, "idle", i)
	}
	testutil.Wait(t, 2*waitLong, "all runs waiting", func() bool {
		list, _, err := c.List(t.Context(), workflow.RunFilter{Workflow: "idle", Limit: runs})
		if err != nil || len(list) != runs {
			return false
		}
		for _, r := range list {
			if r.Step("wait").State != workflow.StepWaiting {
				return false
			}
		}
		return true
	})
	testutil.Wait(t, waitLong, "no task running", func() bool { return w.Stats().Running == 0 })
	if after := runtime.NumGoroutine(); after > before+20 {
		t.Fatalf("%d goroutines with %d runs waiting, %d with one", after, runs, before)
	}
	if _, err := c.SignalRun(t.Context(), first, nil); err != nil {
		t.Fatal(err)
	}
	if r := wait(t, c, first); r.Status != workflow.RunCompleted || string(r.Step("wait").Output) != "null" {
		t.Fatalf("run %s (%s), wait output %s", r.Status, r.Error, r.Step("wait").Output)
	}
}

// TestSignalBadInput: invalid keys, payloads that are not JSON or too
// large, and unknown runs get a clear error; the event stream refuses an
// oversized plain publish.
func TestSignalBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	def := payDef(newCounter())
	c := e.client(t, def)
	if _, err := c.Signal(t.Context(), "payment.confirmed.o1", nil); !errors.Is(err, framework.ErrTopologyMissing) {
		t.Fatalf("signal without the event stream: %v, want ErrTopologyMissing", err)
	}
	w, _ := e.worker(t, []*workflow.Definition{def})
	startWorker(t, w)
	for _, key := range []string{"", "a..b", "a.", "a b", "a.*", "a.>", strings.Repeat("k", workflow.MaxEventKeyLen+1)} {
		if _, err := c.Signal(t.Context(), key, nil); !errors.Is(err, workflow.ErrInvalidEvent) {
			t.Errorf("key %q: %v, want ErrInvalidEvent", key, err)
		}
	}
	if _, err := c.Signal(t.Context(), "k", []byte("not json")); !errors.Is(err, workflow.ErrInvalidEvent) {
		t.Errorf("non-JSON payload: %v", err)
	}
	big := json.RawMessage(`"` + strings.Repeat("x", workflow.MaxEventBytes) + `"`)
	if _, err := c.Signal(t.Context(), "k", big); !errors.Is(err, workflow.ErrEventTooLarge) {
		t.Errorf("oversized payload: %v", err)
	}
	if _, err := c.SignalRun(t.Context(), "no-such-run", nil); !errors.Is(err, workflow.ErrRunNotFound) {
		t.Errorf("unknown run: %v", err)
	}
	js, err := jetstream.New(e.nc)
	if err != nil {
		t.Fatal(err)
	}
	_, err = js.PublishMsg(t.Context(), &nats.Msg{Subject: "jetflow.event.k", Data: make([]byte, workflow.MaxEventBytes+16<<10)})
	if err == nil {
		t.Errorf("the event stream stored an oversized event")
	}
}

// TestWaitEventSurvivesRestart: a waiting run resumes with an event
// published while no worker runs and after the server restarted, on a new
// worker.
func TestWaitEventSurvivesRestart(t *testing.T) {
	t.Parallel()
	te := testutil.NewEnv(t, streams.Config{}, testutil.WithListen())
	fc, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{srv: te.Server, nc: te.Conn, js: te.JS, fc: fc}
	ships := newCounter()
	def := payDef(ships)
	w, _ := e.worker(t, []*workflow.Definition{def})
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	c := e.client(t, def)
	id := start(t, c, "pay", order{ID: "restart"})
	waitStatus(t, c, id, "paid waiting", waiting)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := w.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	e.srv = testutil.RestartServer(t, e.srv)
	testutil.Wait(t, waitLong, "signal after the restart", func() bool {
		_, err := c.Signal(t.Context(), "payment.confirmed.restart", payment{Ref: "after"})
		return err == nil
	})
	e.srv = testutil.RestartServer(t, e.srv)
	w2, _ := e.worker(t, []*workflow.Definition{def})
	startWorker(t, w2)
	var r *workflow.Run
	testutil.Wait(t, waitLong, "run final after the restarts", func() bool {
		var err error
		r, err = c.Status(t.Context(), id)
		return err == nil && r.Status.Final()
	})
	if r.Status != workflow.RunCompleted || shipped(t, r) != "after" || ships.get(id+"/ship") != 1 {
		t.Fatalf("run %s (%s), ship %s, ran %d times", r.Status, r.Error, r.Step("ship").Output, ships.get(id+"/ship"))
	}
}

// TestWaitEventRepairsItsRegistration: a first task that recorded the wait
// but died before its wait entry was stored (the entry is removed here, and
// the attempt fails) registers it again when redelivered, so that an event
// published afterwards resumes the run.
func TestWaitEventRepairsItsRegistration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	second := make(chan error, 1)
	crash := func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, task *framework.Task) error {
			run := task.Header(workflow.HeaderRun)
			err := next.Handle(ctx, task)
			if task.ID != run+":paid" {
				return err
			}
			if task.Attempt == 1 {
				m := &nats.Msg{Subject: "jetflow.waiting.payment.confirmed.crash." + run, Header: nats.Header{}}
				m.Header.Set(jetstream.MsgTTLHeader, "1")
				if _, perr := e.js.PublishMsg(ctx, m); perr != nil {
					return perr
				}
				return errors.New("worker died before its wait entry was stored")
			}
			second <- err
			return err
		})
	}
	ships := newCounter()
	def := payDef(ships, workflow.WithTaskOptions(fast, framework.WithTypeMiddleware(crash)))
	c := e.run(t, def)
	id := start(t, c, "pay", order{ID: "crash"})
	if err := testutil.Recv(t, second, waitLong, "the redelivered first task"); err != nil {
		t.Fatalf("second attempt: %v", err)
	}
	info, err := c.Signal(t.Context(), "payment.confirmed.crash", payment{Ref: "after"})
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Waiting) != 1 || info.Waiting[0] != id {
		t.Fatalf("runs waiting: %v", info.Waiting)
	}
	if r := wait(t, c, id); r.Status != workflow.RunCompleted || shipped(t, r) != "after" {
		t.Fatalf("run %s (%s)", r.Status, r.Error)
	}
}
