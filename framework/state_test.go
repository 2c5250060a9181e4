package framework_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// stateHistory gives the state bucket (created by streams.Ensure) history, so that a test can
// read every record a task went through, not only the last one. Workers
// keep an existing bucket's settings.
func stateHistory(t *testing.T, e *env) jetstream.KeyValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	kv, err := e.js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: streams.MustNames("").StateBucket(), History: 64, TTL: framework.DefaultStateTTL,
	})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// states returns the records of task id, oldest first.
func states(t *testing.T, kv jetstream.KeyValue, id string) []framework.TaskRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	entries, err := kv.History(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	out := make([]framework.TaskRecord, 0, len(entries))
	for _, en := range entries {
		var r framework.TaskRecord
		if err := json.Unmarshal(en.Value(), &r); err != nil {
			t.Fatalf("record of %s: %v: %s", id, err, en.Value())
		}
		out = append(out, r)
	}
	return out
}

// waitState waits until task id's last record is in state st and returns
// the history.
func waitState(t *testing.T, kv jetstream.KeyValue, id string, st framework.TaskState) []framework.TaskRecord {
	t.Helper()
	var h []framework.TaskRecord
	testutil.Wait(t, waitLong, "task "+id+" "+string(st), func() bool {
		h = states(t, kv, id)
		return len(h) > 0 && h[len(h)-1].State == st
	})
	return h
}

func stateNames(h []framework.TaskRecord) string {
	s := make([]string, len(h))
	for i, r := range h {
		s[i] = string(r.State)
	}
	return strings.Join(s, ",")
}

func TestStateSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	w := e.worker(t, framework.WithStateTracking(true), framework.WithTimings(framework.Timings{StateRunningAfter: -1}))
	w.HandleFunc("state.ok", func(ctx context.Context, task *framework.Task) error {
		return framework.SetResult(ctx, map[string]string{"receipt": "r-" + task.ID})
	})
	startWorker(t, w)
	cl, err := framework.NewClient(testutil.Connect(t, e.srv), framework.WithStateTracking(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(t.Context(), "state.ok", nil, framework.WithID("ok1"), framework.WithPriority(framework.PriorityHigh)); err != nil {
		t.Fatal(err)
	}
	h := waitState(t, kv, "ok1", framework.StateSucceeded)
	// The client's "pending" record is written only if no worker record
	// exists yet, so it may be missing, never after "running".
	if got := stateNames(h); got != "pending,running,succeeded" && got != "running,succeeded" {
		t.Fatalf("states %s", got)
	}
	last := h[len(h)-1]
	if last.Type != "state.ok" || last.Priority != framework.PriorityHigh || last.Attempt != 1 || last.Sequence == 0 ||
		last.StartedAt.IsZero() || last.FinishedAt.Before(last.StartedAt) || last.EnqueuedAt.IsZero() {
		t.Fatalf("record %+v", last)
	}
	rec, err := e.cl.Inspector().GetTask(t.Context(), "ok1")
	if err != nil {
		t.Fatal(err)
	}
	var res map[string]string
	if err := rec.DecodeResult(&res); err != nil || res["receipt"] != "r-ok1" {
		t.Fatalf("result %s: %v", rec.Result, err)
	}
	if !rec.State.Final() || rec.Revision == 0 {
		t.Fatalf("GetTask = %+v", rec)
	}
}

func TestStateRetryThenSuccess(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	w := e.worker(t, framework.WithStateTracking(true), framework.WithTimings(framework.Timings{StateRunningAfter: -1}))
	w.HandleFunc("state.flaky", func(ctx context.Context, task *framework.Task) error {
		if task.Attempt == 1 {
			return framework.RetryAfterErr(50*time.Millisecond, errors.New("gateway 503"))
		}
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, "state.flaky", nil, framework.WithID("flaky1"))
	h := waitState(t, kv, "flaky1", framework.StateSucceeded)
	if got := stateNames(h); got != "running,retrying,running,succeeded" {
		t.Fatalf("states %s", got)
	}
	retry := h[len(h)-3]
	if retry.Attempt != 1 || !strings.Contains(retry.Error, "gateway 503") || retry.NextAttemptAt.IsZero() {
		t.Fatalf("retrying record %+v", retry)
	}
	if last := h[len(h)-1]; last.Attempt != 2 || last.Error != "" {
		t.Fatalf("final record %+v", last)
	}
}

func TestStateDeadAndFailed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		deadLetters bool
		want        framework.TaskState
	}{
		{"dead-lettered", true, framework.StateDead},
		{"no dead letters", false, framework.StateFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			kv := stateHistory(t, e)
			w := e.worker(t, framework.WithDeadLetters(tc.deadLetters), framework.WithStateTracking(true), framework.WithTimings(framework.Timings{StateRunningAfter: -1}))
			w.HandleFunc("state.doomed", func(ctx context.Context, task *framework.Task) error {
				if task.Attempt == 1 {
					return framework.RetryAfterErr(10*time.Millisecond, errors.New("first failure"))
				}
				return framework.Permanent(errors.New("card declined"))
			}, framework.WithMaxAttempts(3))
			startWorker(t, w)
			e.enqueue(t, "state.doomed", nil, framework.WithID("doomed1"))
			h := waitState(t, kv, "doomed1", tc.want)
			if got := stateNames(h); got != "running,retrying,running,"+string(tc.want) {
				t.Fatalf("states %s", got)
			}
			last := h[len(h)-1]
			if last.Attempt != 2 || !strings.Contains(last.Error, "card declined") || last.FinishedAt.IsZero() {
				t.Fatalf("final record %+v", last)
			}
		})
	}
}

func TestStateTrackingSwitches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	noop := func(ctx context.Context, task *framework.Task) error { return nil }
	// A worker tracking by default, with one type opted out.
	on := e.worker(t, framework.WithStateTracking(true))
	on.HandleFunc("state.optout", noop, framework.WithTypeStateTracking(false))
	on.HandleFunc("state.tracked", noop)
	startWorker(t, on)
	// A worker not tracking by default (the default), with one type opted in.
	off := e.worker(t)
	off.HandleFunc("state.optin", noop, framework.WithTypeStateTracking(true))
	off.HandleFunc("state.plain", noop)
	startWorker(t, off)

	e.enqueue(t, "state.optout", nil, framework.WithID("out1"))
	e.enqueue(t, "state.plain", nil, framework.WithID("plain1"))
	testutil.Wait(t, waitLong, "untracked tasks done", func() bool {
		return on.Stats().Succeeded == 1 && off.Stats().Succeeded == 1
	})
	// Records of one connection reach the bucket in order: once a tracked
	// task's record from the same worker is there, one for the untracked
	// task would be too.
	e.enqueue(t, "state.tracked", nil, framework.WithID("tracked1"))
	e.enqueue(t, "state.optin", nil, framework.WithID("in1"))
	waitState(t, kv, "tracked1", framework.StateSucceeded)
	waitState(t, kv, "in1", framework.StateSucceeded)
	for _, id := range []string{"out1", "plain1"} {
		if h := states(t, kv, id); len(h) != 0 {
			t.Fatalf("untracked task %s has records: %s", id, stateNames(h))
		}
		if _, err := e.cl.Inspector().GetTask(t.Context(), id); !errors.Is(err, framework.ErrNotFound) {
			t.Fatalf("GetTask(%s) = %v, want ErrNotFound", id, err)
		}
	}
}

// TestStateRunningDelayed checks the default: the "running" record is
// written only for attempts that run for a second.
func TestStateRunningDelayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	insp := e.cl.Inspector()
	sawRunning := make(chan bool, 1)
	w := e.worker(t, framework.WithStateTracking(true))
	w.HandleFunc("state.slow", func(ctx context.Context, task *framework.Task) error {
		if task.ID == "quick" {
			return nil
		}
		sawRunning <- waitCond(ctx, waitLong, func() bool {
			r, err := insp.GetTask(ctx, task.ID)
			return err == nil && r.State == framework.StateRunning
		})
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, "state.slow", nil, framework.WithID("quick"))
	e.enqueue(t, "state.slow", nil, framework.WithID("slow"))
	if !testutil.Recv(t, sawRunning, waitLong, "slow task") {
		t.Fatal("no running record while the slow task ran")
	}
	h := waitState(t, kv, "slow", framework.StateSucceeded)
	if got := stateNames(h); got != "running,succeeded" {
		t.Fatalf("slow task states %s", got)
	}
	if r := h[0]; r.StartedAt.IsZero() || r.UpdatedAt.Sub(r.StartedAt) < 900*time.Millisecond {
		t.Fatalf("running record written %v after the start", r.UpdatedAt.Sub(r.StartedAt))
	}
	if got := stateNames(waitState(t, kv, "quick", framework.StateSucceeded)); got != "succeeded" {
		t.Fatalf("quick task states %s", got)
	}
}

func TestCancelScheduledTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	var ranCancelled atomic.Bool
	sentinel := make(chan struct{})
	w := e.worker(t)
	w.HandleFunc("state.later", func(ctx context.Context, task *framework.Task) error {
		switch task.ID {
		case "cancel-me":
			ranCancelled.Store(true)
		case "sentinel":
			close(sentinel)
		}
		return nil
	})
	startWorker(t, w)
	cl, err := framework.NewClient(testutil.Connect(t, e.srv), framework.WithStateTracking(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(t.Context(), "state.later", nil, framework.WithID("cancel-me"), framework.In(1500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	waitState(t, kv, "cancel-me", framework.StateScheduled)
	insp := cl.Inspector()
	if err := insp.CancelTask(t.Context(), "cancel-me"); err != nil {
		t.Fatal(err)
	}
	rec, err := insp.GetTask(t.Context(), "cancel-me")
	if err != nil || rec.State != framework.StateCancelled || rec.Type != "state.later" || rec.ScheduledFor.IsZero() {
		t.Fatalf("GetTask after cancel = %+v, %v", rec, err)
	}
	if err := insp.CancelTask(t.Context(), "cancel-me"); !errors.Is(err, framework.ErrNotCancellable) {
		t.Fatalf("second cancel: %v, want ErrNotCancellable", err)
	}
	if err := insp.CancelTask(t.Context(), "never-existed"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("cancel of an unknown task: %v, want ErrNotFound", err)
	}
	// The sentinel is due after the cancelled task was: once it ran, the
	// cancelled one would have run too.
	e.enqueue(t, "state.later", nil, framework.WithID("sentinel"), framework.In(1600*time.Millisecond))
	testutil.Recv(t, sentinel, waitLong, "sentinel task")
	if ranCancelled.Load() {
		t.Fatal("the cancelled task ran")
	}
}

func TestGetTaskWithoutRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testutil.Connect(t, e.srv)
	cl, err := framework.NewClient(nc, framework.WithStateTracking(false))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(t.Context(), "state.later", "x", framework.WithID("quiet"), framework.In(time.Hour),
		framework.WithPriority(framework.PriorityLow)); err != nil {
		t.Fatal(err)
	}
	rec, err := cl.Inspector().GetTask(t.Context(), "quiet")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != framework.StateScheduled || rec.Type != "state.later" || rec.Priority != framework.PriorityLow ||
		time.Until(rec.ScheduledFor) < 59*time.Minute {
		t.Fatalf("GetTask = %+v", rec)
	}
	if _, err := cl.Inspector().GetTask(t.Context(), "nope"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("GetTask(nope) = %v", err)
	}
}

func TestQueueStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	names := streams.MustNames("")
	for _, p := range []framework.Priority{framework.PriorityNormal, framework.PriorityCritical} {
		if _, err := topology.EnsureConsumer(ctx, e.js, names, topology.ConsumerSpec{TaskType: "stats.a", Priority: p}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		e.enqueue(t, "stats.a", nil)
	}
	for range 2 {
		e.enqueue(t, "stats.a", nil, framework.WithPriority(framework.PriorityCritical))
	}
	for range 2 {
		e.enqueue(t, "stats.a", nil, framework.In(time.Hour))
	}
	e.enqueue(t, "stats.c", nil, framework.In(time.Hour), framework.WithPriority(framework.PriorityLow))
	if _, err := schedule.New(e.cl).Register(ctx, schedule.Definition{Name: "nightly", Spec: "@daily", Type: "stats.a"}); err != nil {
		t.Fatal(err)
	}
	// One dead letter of type stats.b.
	w := e.worker(t, framework.WithStateTracking(true))
	w.HandleFunc("stats.b", func(ctx context.Context, task *framework.Task) error {
		return framework.Permanent(errors.New("bad"))
	})
	startWorker(t, w)
	e.enqueue(t, "stats.b", nil, framework.WithID("b1"))
	testutil.Wait(t, waitLong, "b1 dead", func() bool {
		r, err := e.cl.Inspector().GetTask(ctx, "b1")
		return err == nil && r.State == framework.StateDead
	})
	var st *inspect.QueueStats
	testutil.Wait(t, waitLong, "dead letter counted", func() bool {
		var err error
		st, err = inspect.New(e.cl).QueueStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Dead["stats.b"] == 1
	})
	get := func(typ string, p framework.Priority) inspect.QueueStat {
		for _, q := range st.Queues {
			if q.Type == typ && q.Priority == p {
				return q
			}
		}
		t.Fatalf("no queue %s/%s in %+v", typ, p, st.Queues)
		return inspect.QueueStat{}
	}
	if q := get("stats.a", framework.PriorityNormal); q.Pending != 3 || q.Scheduled != 2 || q.InFlight != 0 {
		t.Errorf("stats.a normal: %+v", q)
	}
	if q := get("stats.a", framework.PriorityCritical); q.Pending != 2 || q.Scheduled != 0 {
		t.Errorf("stats.a critical: %+v", q)
	}
	if q := get("stats.c", framework.PriorityLow); q.Scheduled != 1 {
		t.Errorf("stats.c low: %+v", q)
	}
	if st.Scheduled != 3 || st.Cron != 1 || st.ScheduledTruncated {
		t.Errorf("totals: scheduled %d cron %d truncated %v", st.Scheduled, st.Cron, st.ScheduledTruncated)
	}
	if st.Queues[0].Type != "stats.a" || st.Queues[0].Priority != framework.PriorityCritical {
		t.Errorf("queues not sorted by type then priority: %+v", st.Queues)
	}
}

func TestSetResultErrors(t *testing.T) {
	t.Parallel()
	if err := framework.SetResult(context.Background(), 1); !errors.Is(err, framework.ErrNoTask) {
		t.Fatalf("outside a handler: %v", err)
	}
	e := newEnv(t)
	got := make(chan error, 1)
	w := e.worker(t)
	w.HandleFunc("state.big", func(ctx context.Context, task *framework.Task) error {
		got <- framework.SetResult(ctx, strings.Repeat("x", framework.MaxResultBytes))
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, "state.big", nil)
	if err := testutil.Recv(t, got, waitLong, "handler"); !errors.Is(err, framework.ErrResultTooLarge) {
		t.Fatalf("large result: %v", err)
	}
}

func TestStateTTLOption(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if err := framework.EnsureBuckets(t.Context(), e.js, framework.WithStateTTL(time.Hour), framework.WithEffectsTTL(2*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// A TTL given updates the existing bucket; one left at its default
	// does not.
	if err := framework.EnsureBuckets(t.Context(), e.js, framework.WithStateTTL(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	for bucket, want := range map[string]time.Duration{"JETFLOW_STATE": 3 * time.Hour, "JETFLOW_EFFECTS": 2 * time.Hour} {
		kv, err := e.js.KeyValue(t.Context(), bucket)
		if err != nil {
			t.Fatal(err)
		}
		st, err := kv.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if st.TTL() != want {
			t.Errorf("%s TTL %v, want %v", bucket, st.TTL(), want)
		}
	}
	if _, err := framework.NewWorker(e.nc, framework.WithStateTTL(time.Millisecond)); !errors.Is(err, framework.ErrInvalidOption) {
		t.Fatalf("tiny TTL: %v", err)
	}
}

// Client.Cancel and Inspector.CancelTask are one operation: cancelling
// through the client records the cancellation too, and a second cancel
// reports the task as not cancellable (and not found) through either.
func TestClientCancelAgreesWithInspector(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := stateHistory(t, e)
	cl, err := framework.NewClient(testutil.Connect(t, e.srv), framework.WithStateTracking(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(t.Context(), "state.cancel", nil, framework.WithID("c1"), framework.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	waitState(t, kv, "c1", framework.StateScheduled)
	if err := cl.Cancel(t.Context(), "c1"); err != nil {
		t.Fatal(err)
	}
	rec, err := cl.Inspector().GetTask(t.Context(), "c1")
	if err != nil || rec.State != framework.StateCancelled || rec.Type != "state.cancel" {
		t.Fatalf("GetTask after Client.Cancel = %+v, %v; want cancelled", rec, err)
	}
	for name, cancel := range map[string]func(context.Context, string) error{
		"Client.Cancel": cl.Cancel, "Inspector.CancelTask": cl.Inspector().CancelTask,
	} {
		err := cancel(t.Context(), "c1")
		if !errors.Is(err, framework.ErrNotCancellable) || !errors.Is(err, framework.ErrNotFound) {
			t.Errorf("second cancel with %s: %v, want ErrNotCancellable and ErrNotFound", name, err)
		}
	}
}
