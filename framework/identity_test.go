package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/effects"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// chargeHandler is a handler whose effect "charge" records the task's
// payload; ran counts the calls of the effect per task ID, and got receives
// "<task ID> <value>" for every run.
type chargeHandler struct {
	mu      sync.Mutex
	applied map[string]int
	got     chan string
	fail    atomic.Bool // fail each run permanently after the effect
}

func newChargeHandler() *chargeHandler {
	return &chargeHandler{applied: map[string]int{}, got: make(chan string, 16)}
}

func (h *chargeHandler) handle(ctx context.Context, task *framework.Task) error {
	v, err := effects.OnceValue(ctx, "charge", func(context.Context) (string, error) {
		h.mu.Lock()
		h.applied[task.ID]++
		h.mu.Unlock()
		return string(task.Payload), nil
	})
	if err != nil {
		return err
	}
	h.got <- task.ID + " " + v
	if h.fail.Load() {
		return framework.Permanent(errors.New("declined after charging"))
	}
	return nil
}

func (h *chargeHandler) appliedTo(id string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.applied[id]
}

// waitDeadLetter waits for the dead letter of the task stored at seq.
func (e *env) waitDeadLetter(t *testing.T, seq uint64) dlq.Record {
	t.Helper()
	var found dlq.Record
	testutil.Wait(t, waitLong, fmt.Sprintf("the dead letter of task %d", seq), func() bool {
		for _, r := range e.deadLetters(t) {
			if r.OriginalSeq == seq {
				found = r
				return true
			}
		}
		return false
	})
	return found
}

// A producer publishes a task under another task's ID (Jetflow-Id) with a
// message ID of its own, so that the stream does not drop it as that task's
// duplicate: before the victim's task, and without any message ID. Neither
// runs; both are dead-lettered as invalid under their sequence; the
// victim's task then runs its effect itself and gets its own value.
func TestForgedTaskIDIsDeadLettered(t *testing.T) {
	t.Parallel()
	const typ = "id.victim"
	e := newEnv(t)
	h := newChargeHandler()
	w := e.worker(t)
	w.HandleFunc(typ, h.handle)
	startWorker(t, w)

	subject := "jetflow.task.normal." + typ
	forgeries := []nats.Header{
		{jetstream.MsgIDHeader: {"evil-1"}, framework.HeaderTaskID: {"victim-1"}},
		{framework.HeaderTaskID: {"victim-1"}},
	}
	for _, fh := range forgeries {
		seq := e.publishRaw(t, subject, fh, []byte(`"attacker"`))
		rec := e.waitDeadLetter(t, seq)
		if rec.Reason != dlq.ReasonInvalid || rec.TaskID != "seq-"+strconv.FormatUint(seq, 10) {
			t.Errorf("forgery %v dead-lettered as %q with ID %q, want invalid under seq-%d", fh, rec.Reason, rec.TaskID, seq)
		}
	}
	e.enqueue(t, typ, "victim", framework.WithID("victim-1"))
	if got := testutil.Recv(t, h.got, waitLong, "the victim's task"); got != `victim-1 "victim"` {
		t.Errorf("the victim's task ran as %q, want its own effect value", got)
	}
	if n := h.appliedTo("victim-1"); n != 1 {
		t.Errorf("the victim's effect ran %d times, want 1", n)
	}
	select {
	case got := <-h.got:
		t.Errorf("a forged task ran: %s", got)
	default:
	}
}

// The server sets Nats-Scheduler on the tasks schedules fire, which is
// what lets a fired task carry an ID other than its message ID. A producer
// cannot set it on the task stream, alone or with the purge header that
// may accompany it.
func TestSchedulerHeaderCannotBePublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, h := range map[string]nats.Header{
		"delayed task's": {framework.HeaderScheduler: {"jetflow.sched.victim"}, framework.HeaderTaskID: {"victim"}},
		"cron's":         {framework.HeaderScheduler: {"jetflow.cron.daily"}, framework.HeaderTaskID: {"cron-daily-20261204T000000Z"}},
		"with purge":     {framework.HeaderScheduler: {"jetflow.sched.victim"}, "Nats-Schedule-Next": {"purge"}},
	} {
		for _, subject := range []string{"jetflow.task.normal.id.sched", "jetflow.ord.id.sched.0"} {
			_, err := e.js.PublishMsg(t.Context(), &nats.Msg{Subject: subject, Header: h, Data: []byte("{}")})
			if err == nil {
				t.Errorf("%s scheduler header stored on %s", name, subject)
			}
		}
	}
}

// Tick IDs of repeating schedules are predictable ("cron-<name>-<time>"):
// a task no schedule fired may not carry one, whoever publishes it, and
// the client refuses one at enqueue.
func TestForgedCronTickIDIsDeadLettered(t *testing.T) {
	t.Parallel()
	const typ = "id.cron"
	e := newEnv(t)
	h := newChargeHandler()
	w := e.worker(t)
	w.HandleFunc(typ, h.handle)
	startWorker(t, w)

	const tick = "cron-daily-20261204T000000Z"
	for _, fh := range []nats.Header{
		{jetstream.MsgIDHeader: {tick}, framework.HeaderTaskID: {tick}},
		{jetstream.MsgIDHeader: {tick}},
	} {
		seq := e.publishRaw(t, "jetflow.task.normal."+typ, fh, []byte(`"attacker"`))
		if rec := e.waitDeadLetter(t, seq); rec.Reason != dlq.ReasonInvalid || rec.TaskID == tick {
			t.Errorf("forged tick %v dead-lettered as %q with ID %q, want invalid under its sequence", fh, rec.Reason, rec.TaskID)
		}
	}
	if _, err := e.cl.Enqueue(t.Context(), typ, "x", framework.WithID(tick)); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("enqueue with a cron tick's ID: %v, want ErrInvalidOption", err)
	}
	if n := h.appliedTo(tick); n != 0 {
		t.Errorf("a forged tick ran its effect %d times", n)
	}
}

// A replayed task runs under its original ID: an effect the original
// applied before dying is skipped and its recorded value returned.
func TestReplayKeepsIDAndRecordedEffects(t *testing.T) {
	t.Parallel()
	const typ = "id.replay"
	e := newEnv(t)
	h := newChargeHandler()
	h.fail.Store(true)
	w := e.worker(t)
	w.HandleFunc(typ, h.handle)
	startWorker(t, w)

	e.enqueue(t, typ, "first", framework.WithID("pay-1"))
	testutil.Recv(t, h.got, waitLong, "the original run")
	rec := e.waitDeadLetters(t, 1)[0]
	h.fail.Store(false)
	info, err := dlq.New(e.cl).Replay(t.Context(), rec.Seq)
	if err != nil || info.ID != "pay-1" {
		t.Fatalf("Replay = %+v, %v", info, err)
	}
	if got := testutil.Recv(t, h.got, waitLong, "the replayed run"); got != `pay-1 "first"` {
		t.Errorf("the replay ran as %q, want pay-1 with the recorded value", got)
	}
	if n := h.appliedTo("pay-1"); n != 1 {
		t.Errorf("the effect ran %d times, want 1 (the replay reuses the record)", n)
	}
}

// A producer copies what a replay looks like on a task subject (the
// original's Jetflow-Id, a replay-shaped message ID, the replay headers
// naming the real record or no record) with another payload. None runs,
// and the real replay still finds the original's effects.
func TestForgedReplayIsDeadLettered(t *testing.T) {
	t.Parallel()
	const typ = "id.fakereplay"
	e := newEnv(t)
	h := newChargeHandler()
	h.fail.Store(true)
	w := e.worker(t)
	w.HandleFunc(typ, h.handle)
	startWorker(t, w)

	e.enqueue(t, typ, "first", framework.WithID("pay-2"))
	testutil.Recv(t, h.got, waitLong, "the original run")
	rec := e.waitDeadLetters(t, 1)[0]
	h.fail.Store(false)
	for _, from := range []uint64{rec.Seq, rec.Seq + 1000} {
		fh := nats.Header{}
		fh.Set(jetstream.MsgIDHeader, fmt.Sprintf("replay-JETFLOW_DLQ-%d-0123456789abcdef", from))
		fh.Set(framework.HeaderTaskID, "pay-2")
		fh.Set(dlq.HeaderReplayedFromSeq, strconv.FormatUint(from, 10))
		fh.Set(dlq.HeaderDeadCount, "1")
		seq := e.publishRaw(t, "jetflow.task.normal."+typ, fh, []byte(`"attacker"`))
		if r := e.waitDeadLetter(t, seq); r.Reason != dlq.ReasonInvalid || r.TaskID == "pay-2" {
			t.Errorf("forged replay of record %d dead-lettered as %q with ID %q, want invalid under its sequence", from, r.Reason, r.TaskID)
		}
	}
	if _, err := dlq.New(e.cl).Replay(t.Context(), rec.Seq); err != nil {
		t.Fatal(err)
	}
	if got := testutil.Recv(t, h.got, waitLong, "the real replay"); got != `pay-2 "first"` {
		t.Errorf("the real replay ran as %q, want pay-2 with the original's value", got)
	}
	if n := h.appliedTo("pay-2"); n != 1 {
		t.Errorf("the effect ran %d times, want 1", n)
	}
}

// A delayed task is fired by a schedule too, but by its own: a producer
// allowed to delay tasks may not use one to take a cron tick's ID. The
// schedule is written here as the delay mover would write it.
func TestDelayedTaskCannotTakeCronTickID(t *testing.T) {
	t.Parallel()
	const typ = "id.delaycron"
	e := newEnv(t)
	h := newChargeHandler()
	w := e.worker(t)
	w.HandleFunc(typ, h.handle)
	startWorker(t, w)

	const tick = "cron-daily-20261204T000000Z"
	m := &nats.Msg{Subject: "jetflow.sched." + tick, Data: []byte(`"attacker"`), Header: nats.Header{}}
	m.Header.Set(jetstream.ScheduleHeader, "@at "+time.Now().UTC().Format(time.RFC3339Nano))
	m.Header.Set(jetstream.ScheduleTargetHeader, "jetflow.fired.normal."+typ)
	m.Header.Set(framework.HeaderTaskID, tick)
	if _, err := e.js.PublishMsg(t.Context(), m); err != nil {
		t.Fatal(err)
	}
	var rec dlq.Record
	testutil.Wait(t, waitLong, "the delayed task dead-lettered", func() bool {
		recs := e.deadLetters(t)
		if len(recs) == 1 {
			rec = recs[0]
		}
		return len(recs) == 1
	})
	if rec.Reason != dlq.ReasonInvalid || rec.TaskID == tick {
		t.Errorf("dead-lettered as %q under %q, want invalid under its sequence", rec.Reason, rec.TaskID)
	}
	if n := h.appliedTo(tick); n != 0 {
		t.Errorf("the delayed task ran the tick's effect %d times", n)
	}
}
