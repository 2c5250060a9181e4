package framework_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// A producer publishes a delayed task under another producer's pending
// delayed task's ID, with its own Nats-Msg-Id, its own payload and an
// earlier due time. The victim's task runs once, at its due time, with
// its payload; the newcomer is dead-lettered with reason "conflict" and
// counted in the worker's Stats.
func TestDelayedTaskCannotReplaceAPendingSchedule(t *testing.T) {
	t.Parallel()
	const typ = "delay.victim"
	e := newEnv(t)
	type run struct {
		at      time.Time
		payload string
	}
	ran := make(chan run, 4)
	w := e.worker(t)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		ran <- run{time.Now(), string(task.Payload)}
		return nil
	})
	startWorker(t, w)
	due := time.Now().Add(3 * time.Second)
	e.enqueue(t, typ, "victim", framework.WithID("victim"), framework.At(due))
	testutil.Wait(t, waitLong, "the victim's task moved", func() bool { return w.Stats().DelaysMoved == 1 })

	m := &nats.Msg{Subject: "jetflow.delay.victim", Data: []byte(`"attacker"`), Header: nats.Header{}}
	m.Header.Set(jetstream.MsgIDHeader, "evil")
	m.Header.Set(framework.HeaderTaskID, "victim")
	m.Header.Set("Jetflow-Scheduled-For", time.Now().UTC().Format(time.RFC3339Nano))
	m.Header.Set("Jetflow-Schedule-Target", "jetflow.fired.normal."+typ)
	if _, err := e.js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	var dead []dlq.Record
	testutil.Wait(t, waitLong, "the newcomer dead-lettered", func() bool {
		dead = e.deadLetters(t)
		return len(dead) > 0
	})
	if d := dead[0]; len(dead) != 1 || d.Reason != dlq.ReasonConflict || d.TaskID != "victim" || d.Type != typ || string(d.Payload) != `"attacker"` {
		t.Errorf("dead letters %+v, want the newcomer with reason conflict", dead)
	}
	r := testutil.Recv(t, ran, waitLong, "the victim's task")
	if r.at.Before(due) || r.payload != `"victim"` {
		t.Errorf("the victim's task ran %v before its due time with payload %s", due.Sub(r.at), r.payload)
	}
	e.waitSettled(t, typ, framework.PriorityNormal)
	select {
	case again := <-ran:
		t.Errorf("the victim's ID ran twice, the second time with %s", again.payload)
	default:
	}
	if st := w.Stats(); st.DelaysConflicts != 1 || st.DelaysRejected != 0 || st.DelaysMoved != 1 {
		t.Errorf("Stats: moved %d, rejected %d, conflicts %d; want 1, 0, 1", st.DelaysMoved, st.DelaysRejected, st.DelaysConflicts)
	}
}
