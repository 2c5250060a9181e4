package framework_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
)

// Delayed tasks published straight to the delay stream, as any producer
// can: the workers' delay mover schedules the valid ones (a body-less
// message with a Status header included: it is a task, not a server
// status) and dead-letters each invalid one with reason "invalid" and what
// is wrong, under a safe ID; nothing is left in the delay stream.
func TestDelayMoverRejectsInvalidDelayedTasks(t *testing.T) {
	t.Parallel()
	const typ = "delay.hostile"
	e := newEnv(t, testutil.WithMaxPayload(8<<10))
	ctx := t.Context()
	var mu sync.Mutex
	ran := map[string]int{}
	w := e.worker(t)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		defer mu.Unlock()
		ran[task.ID]++
		return nil
	})
	startWorker(t, w)

	due := time.Now().Add(100 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	target := "jetflow.fired.normal." + typ
	cases := []struct {
		id, target, due, taskID string
		data                    []byte
		extra                   nats.Header
		// wantType and wantErr describe the dead letter; "" runs.
		wantType, wantErr string
	}{
		{id: "ok", target: target, due: due},
		{id: "status", target: target, due: due, extra: nats.Header{"Status": {"409"}, "Description": {"Consumer Deleted"}}},
		{id: "work-target", target: "jetflow.task.normal." + typ, due: due, wantType: "_invalid", wantErr: "Jetflow-Schedule-Target"},
		{id: "bad-prio", target: "jetflow.fired.urgent." + typ, due: due, wantType: "_invalid", wantErr: "Jetflow-Schedule-Target"},
		{id: "no-target", due: due, wantType: "_invalid", wantErr: "Jetflow-Schedule-Target"},
		{id: "bad-due", target: target, due: "tomorrow", wantType: typ, wantErr: "Jetflow-Scheduled-For"},
		// Past due times run now, including those the server cannot hold
		// (the zero time is no schedule; before 1678 its clock wraps).
		{id: "zero-due", target: target, due: "0001-01-01T00:00:00Z"},
		{id: "ancient-due", target: target, due: "1500-01-01T00:00:00Z"},
		// After 2262 the server's clock wraps too: it would fire now.
		{id: "far-due", target: target, due: "3000-01-01T00:00:00Z", wantType: typ, wantErr: "the last time a schedule can hold"},
		{id: "thief", target: target, due: due, taskID: "victim", wantType: typ, wantErr: "names task thief"},
		// Fits the server's limit as published, not with the schedule's
		// headers (filled in below).
		{id: "too-big", target: target, due: due, wantType: typ, wantErr: "bytes with its schedule headers"},
	}
	for _, c := range cases {
		h := nats.Header{"Jetflow-Scheduled-For": {c.due}}
		if c.target != "" {
			h.Set("Jetflow-Schedule-Target", c.target)
		}
		if c.taskID != "" {
			h.Set(framework.HeaderTaskID, c.taskID)
		}
		for k, v := range c.extra {
			h[k] = v
		}
		data := c.data
		if data == nil && c.extra == nil {
			data = []byte("{}")
		}
		if c.id == "too-big" {
			size := len("NATS/1.0\r\n\r\n")
			for k, vs := range h {
				for _, v := range vs {
					size += len(k) + len(v) + 4
				}
			}
			data = make([]byte, 8<<10-size-8)
		}
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := e.js.PublishMsg(pctx, &nats.Msg{Subject: "jetflow.delay." + c.id, Header: h, Data: data})
		cancel()
		if err != nil {
			t.Fatalf("publish %s: %v", c.id, err)
		}
	}
	var dead []dlq.Record
	testutil.Wait(t, waitLong, "the valid delayed tasks run and the others dead-lettered", func() bool {
		dead = e.deadLetters(t)
		mu.Lock()
		defer mu.Unlock()
		return len(dead) == 7 && ran["ok"] == 1 && ran["status"] == 1 && ran["zero-due"] == 1 && ran["ancient-due"] == 1
	})
	byID := map[string]dlq.Record{}
	for _, d := range dead {
		byID[strings.TrimPrefix(d.OriginalSubject, "jetflow.delay.")] = d
	}
	for _, c := range cases {
		if c.wantType == "" {
			continue
		}
		d, ok := byID[c.id]
		switch {
		case !ok:
			t.Errorf("%s: no dead letter (have %v)", c.id, byID)
		case d.Reason != dlq.ReasonInvalid || d.Type != c.wantType || !strings.Contains(d.LastError, c.wantErr):
			t.Errorf("%s: dead letter type %q reason %q error %q; want %s, invalid, %q", c.id, d.Type, d.Reason, d.LastError, c.wantType, c.wantErr)
		}
	}
	if st := w.Stats(); st.DelaysMoved != 4 || st.DelaysRejected != 7 {
		t.Errorf("Stats: moved %d, rejected %d; want 4 and 7", st.DelaysMoved, st.DelaysRejected)
	}
	testutil.Wait(t, waitLong, "empty streams", func() bool { return e.taskStreamMsgs(t) == 0 })
	mu.Lock()
	defer mu.Unlock()
	if len(ran) != 4 {
		t.Errorf("ran %v, want only ok, status, zero-due and ancient-due", ran)
	}
}

// A delayed task that waited in the delay stream past its due time (no
// worker ran) runs as soon as a worker moves it: the schedule of a past
// due time fires at once.
func TestDelayedTaskMovedAfterItsDueTimeRuns(t *testing.T) {
	t.Parallel()
	const typ = "delay.overdue"
	e := newEnv(t)
	due := time.Now().Add(50 * time.Millisecond)
	e.enqueue(t, typ, nil, framework.WithID("overdue"), framework.At(due))
	testutil.Wait(t, waitLong, "the due time to pass", func() bool { return time.Now().After(due.Add(100 * time.Millisecond)) })
	w := e.worker(t)
	starts := recordStarts(w, typ)
	startWorker(t, w)
	if r := testutil.Recv(t, starts, waitLong, "the overdue task's start"); r.id != "overdue" {
		t.Fatalf("started %s", r.id)
	}
}

// A delayed task caught in the middle of its move (its schedule stored, its
// delayed message not yet removed) is one task to every reader: counted
// once by QueueStats, listed once, found by GetTask. Built here by storing
// the schedule by hand while no worker runs.
func TestDelayedTaskMidMoveCountsOnce(t *testing.T) {
	t.Parallel()
	const typ = "delay.midmove"
	e := newEnv(t)
	ctx := t.Context()
	info := e.enqueue(t, typ, nil, framework.WithID("moving"), framework.In(time.Hour))
	due := info.ScheduledFor.UTC().Format(time.RFC3339Nano)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, err := e.js.PublishMsg(pctx, &nats.Msg{Subject: "jetflow.sched.moving", Data: []byte("null"), Header: nats.Header{
		"Nats-Schedule": {"@at " + due}, "Nats-Schedule-Target": {"jetflow.fired.normal." + typ},
		framework.HeaderTaskID: {"moving"}, framework.HeaderScheduledFor: {due}}})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	if n := e.taskStreamMsgs(t); n != 2 {
		t.Fatalf("%d messages stored, want the delayed task and its schedule", n)
	}
	ins := inspect.New(e.cl)
	st, err := ins.QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Scheduled != 1 || len(st.Queues) != 1 || st.Queues[0].Scheduled != 1 {
		t.Errorf("QueueStats: scheduled %d, queues %+v; want 1", st.Scheduled, st.Queues)
	}
	list, _, err := ins.ScheduledTasks(ctx, inspect.ScheduledFilter{})
	if err != nil || len(list) != 1 || list[0].ID != "moving" || list[0].Type != typ {
		t.Errorf("ScheduledTasks: %+v, %v; want the task once", list, err)
	}
	if rec, err := e.cl.Inspector().GetTask(ctx, "moving"); err != nil || rec.State != framework.StateScheduled {
		t.Errorf("GetTask: %+v, %v", rec, err)
	}
	if err := e.cl.Cancel(ctx, "moving"); err != nil {
		t.Fatalf("Cancel: %v", err)
	}
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Errorf("%d messages left after Cancel", n)
	}
}
