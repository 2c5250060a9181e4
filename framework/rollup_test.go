package framework_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/testutil"
)

// A producer may publish on work subjects, and subject permissions cannot
// see headers: a Nats-Rollup header on a work subject must not delete the
// subject's waiting tasks ("sub") or the whole stream ("all"), with its
// delayed tasks and cron schedules; nor may one on a delay subject delete
// the delayed tasks. The task and delay streams refuse the message at
// publish, and afterwards the waiting tasks run, the delayed task and the
// cron schedule are still pending, and both still fire (issue 9, finding 1;
// decision 012).
func TestProducerRollupDeletesNothing(t *testing.T) {
	t.Parallel()
	const typ = "rollup.victim"
	e := newEnv(t)
	ctx := t.Context()

	waiting := []string{"w1", "w2", "w3", "w4", "w5"}
	for _, id := range waiting {
		e.enqueue(t, typ, nil, framework.WithID(id))
	}
	e.enqueue(t, typ, nil, framework.WithID("later"), framework.In(time.Hour))
	if _, err := schedule.New(e.cl).Register(ctx, schedule.Definition{Name: "tick", Spec: "@every 1s", Type: typ}); err != nil {
		t.Fatal(err)
	}

	subject := "jetflow.task.normal." + typ
	for _, m := range []*nats.Msg{
		{Subject: subject, Header: nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}}, Data: []byte("{}")},
		{Subject: subject, Header: nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupAll}}, Data: []byte("{}")},
		{Subject: "jetflow.task.high.other", Header: nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupAll}}},
		// Delayed tasks go to the delay stream, which refuses rollups too
		// (decision 025); producers never write the schedule stream.
		{Subject: "jetflow.delay.later", Header: nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}}, Data: []byte("{}")},
		{Subject: "jetflow.delay.other", Header: nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupAll}}},
	} {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err := e.js.PublishMsg(pctx, m)
		cancel()
		if err == nil {
			t.Errorf("Nats-Rollup: %s on %s was stored", m.Header.Get(jetstream.MsgRollup), m.Subject)
		}
	}

	// The delayed task and the cron schedule are still pending.
	in := e.cl.Inspector()
	if rec, err := in.GetTask(ctx, "later"); err != nil || rec.State != framework.StateScheduled {
		t.Errorf("delayed task after the rollups: %+v, %v", rec, err)
	}
	if _, err := schedule.New(e.cl).Get(ctx, "tick"); err != nil {
		t.Errorf("cron schedule after the rollups: %v", err)
	}

	// The waiting tasks run; delays and cron still fire.
	var mu sync.Mutex
	ran := map[string]int{}
	cronRan := 0
	w := e.worker(t)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		defer mu.Unlock()
		if strings.HasPrefix(task.ID, "cron-tick-") {
			cronRan++
		} else {
			ran[task.ID]++
		}
		return nil
	})
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("soon"), framework.In(200*time.Millisecond))
	testutil.Wait(t, waitLong, "waiting tasks, the delayed task and a cron tick ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, id := range append(waiting, "soon") {
			if ran[id] == 0 {
				return false
			}
		}
		return cronRan > 0
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range ran {
		if n != 1 {
			t.Errorf("task %s ran %d times, want 1", id, n)
		}
	}
	if ran["later"] != 0 {
		t.Error("the task due in an hour ran")
	}
}

// A schedule written straight to the schedule stream can choose its task's
// headers, but not its target (the server keeps it within the schedule
// stream: staging subjects only) nor another task's ID: a fired task whose
// Jetflow-Id differs from the ID of its schedule subject is dead-lettered as
// invalid without running, under its sequence ID; an honest one runs.
func TestFiredTaskCannotClaimAnotherID(t *testing.T) {
	t.Parallel()
	const typ = "fired.claim"
	e := newEnv(t)
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
	publish := func(subject, id, target string) error {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := e.js.PublishMsg(pctx, &nats.Msg{Subject: subject, Data: []byte("{}"), Header: nats.Header{
			jetstream.ScheduleHeader: {"@at " + due}, jetstream.ScheduleTargetHeader: {target}, framework.HeaderTaskID: {id}}})
		return err
	}
	// Targets outside the schedule stream are refused at publish.
	for _, target := range []string{"jetflow.task.normal." + typ, "jetflow.wf.run1", "jetflow.fired.urgent." + typ} {
		if err := publish("jetflow.sched.aimed", "aimed", target); err == nil {
			t.Errorf("a schedule aimed at %s was stored", target)
		}
	}
	if err := publish("jetflow.sched.thief", "victim", "jetflow.fired.normal."+typ); err != nil {
		t.Fatal(err)
	}
	if err := publish("jetflow.sched.honest", "honest", "jetflow.fired.normal."+typ); err != nil {
		t.Fatal(err)
	}
	var dead []dlq.Record
	testutil.Wait(t, waitLong, "the thief dead-lettered and the honest task run", func() bool {
		dead = e.deadLetters(t)
		mu.Lock()
		defer mu.Unlock()
		return len(dead) == 1 && ran["honest"] == 1
	})
	if d := dead[0]; d.Reason != dlq.ReasonInvalid || !strings.HasPrefix(d.TaskID, "seq-") || !strings.Contains(d.LastError, "jetflow.sched.thief") {
		t.Errorf("dead letter %s %s %q, want reason invalid under a sequence ID", d.TaskID, d.Reason, d.LastError)
	}
	mu.Lock()
	defer mu.Unlock()
	if ran["victim"] != 0 || len(ran) != 1 {
		t.Errorf("ran %v, want only the honest task", ran)
	}
}
