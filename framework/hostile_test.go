package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/testutil"
)

// publishRaw stores a message straight on a task subject, the way a script
// or a non-Go producer would, bypassing the client's validation.
func (e *env) publishRaw(t *testing.T, subject string, h nats.Header, body []byte) uint64 {
	t.Helper()
	ack, err := e.js.PublishMsg(t.Context(), &nats.Msg{Subject: subject, Header: h, Data: body})
	if err != nil {
		t.Fatalf("publish to %s: %v", subject, err)
	}
	return ack.Sequence
}

// statusHeaders are the headers of a stored message that nats.go's pull
// iterator would take for a server status when the body is empty.
func statusHeaders(id, status, desc string) nats.Header {
	h := nats.Header{}
	h.Set("Jetflow-Id", id)
	h.Set("Nats-Msg-Id", id) // a task no schedule fired claims its message ID only
	h.Set("Status", status)
	if desc != "" {
		h.Set("Description", desc)
	}
	return h
}

// Findings 2 and 3: tasks whose stored headers look like server statuses
// ("Status: 409 Consumer Deleted", "100", "404", "408") run like any other
// task, and never cost another task an attempt: with MaxAttempts 1, a good
// task dropped from its pull would be dead-lettered without running.
func TestStatusHeadersDoNotPoisonThePull(t *testing.T) {
	t.Parallel()
	const typ = "hostile.status"
	const good = 60
	e := newEnv(t)
	var mu sync.Mutex
	ran := make(map[string]int)
	var runs atomic.Int32
	w := e.worker(t)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		runs.Add(1)
		return nil
	}, framework.WithMaxAttempts(1), framework.WithPrefetch(8))
	poisons := []nats.Header{
		statusHeaders("poison-409", "409", "Consumer Deleted"),
		statusHeaders("poison-409-leader", "409", "Leadership Change"),
		statusHeaders("poison-100", "100", "Idle Heartbeat"),
		statusHeaders("poison-404", "404", "No Messages"),
		statusHeaders("poison-408", "408", "Request Timeout"),
		statusHeaders("poison-503", "503", ""),
	}
	subject := dlqNames.TaskSubject(framework.PriorityNormal, typ)
	var goodIDs []string
	for i := range good {
		goodIDs = append(goodIDs, e.enqueue(t, typ, i).ID)
		if i%10 == 5 {
			e.publishRaw(t, subject, poisons[i/10], nil)
		}
	}
	startWorker(t, w)
	total := good + len(poisons)
	testutil.Wait(t, waitLong, "every task ran", func() bool { return int(runs.Load()) >= total })
	e.waitSettled(t, typ, framework.PriorityNormal)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range goodIDs {
		if ran[id] != 1 {
			t.Errorf("good task %s ran %d times, want 1", id, ran[id])
		}
	}
	for _, h := range poisons {
		if id := h.Get("Jetflow-Id"); ran[id] != 1 {
			t.Errorf("task %s (Status %s) ran %d times, want 1", id, h.Get("Status"), ran[id])
		}
	}
	if dls := e.deadLetters(t); len(dls) != 0 {
		t.Errorf("%d tasks dead-lettered, want none: %+v", len(dls), dls[0])
	}
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Errorf("task stream holds %d messages, want 0", n)
	}
}

// Finding 2, router side: a task with status-like headers that reaches its
// max deliveries without its worker's help is dead-lettered by the router,
// whose direct get must read it as a stored message.
func TestStatusHeadersReachTheDeadLetterStream(t *testing.T) {
	t.Parallel()
	const typ = "hostile.status.dead"
	e := newEnv(t)
	subject := dlqNames.TaskSubject(framework.PriorityNormal, typ)
	for i, st := range []string{"409", "100", "404"} {
		e.publishRaw(t, subject, statusHeaders(fmt.Sprintf("dead-%d", i), st, "Consumer Deleted"), nil)
	}
	dieWorker := e.worker(t, framework.WithDeadLetters(false))
	dieWorker.HandleFunc(typ, func(context.Context, *framework.Task) error { return errBoom },
		framework.WithMaxAttempts(1), dlqFast)
	startWorker(t, dieWorker)
	testutil.Wait(t, waitLong, "max-deliveries advisories", func() bool { return e.maxDeliveryAdvisories(t) >= 3 })

	router := e.worker(t)
	router.HandleFunc("hostile.other", noopHandler)
	startWorker(t, router)
	dls := e.waitDeadLetters(t, 3)
	for _, d := range dls {
		if d.Reason != dlq.ReasonMaxDeliveries || d.Type != typ {
			t.Errorf("record %d: reason %q type %q", d.Seq, d.Reason, d.Type)
		}
	}
	testutil.Wait(t, waitLong, "task stream empty", func() bool { return e.taskStreamMsgs(t) == 0 })
	// The operations API reads the records back despite their headers.
	for _, d := range dls {
		if _, err := dlq.New(e.cl).Get(t.Context(), d.Seq); err != nil {
			t.Errorf("Get(%d): %v", d.Seq, err)
		}
	}
}

// Findings 4 and 7: task IDs from the wire that are too long (a 4 KB
// Nats-Msg-Id, a 60 KB Jetflow-Id) or hold characters no ID may have are
// never used as keys: with state tracking on, a 4 KB ID in a KV subject
// would exceed the server's control line and close the worker's connection
// for good. They are dead-lettered with reason "invalid" under "seq-<n>",
// without running, and the worker keeps consuming.
func TestInvalidWireIDsAreDeadLettered(t *testing.T) {
	t.Parallel()
	const typ = "hostile.ids"
	e := newEnv(t)
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, framework.WithStateTracking(true), framework.WithTimings(framework.Timings{StateRunningAfter: -1}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ran := make(map[string]bool)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		ran[task.ID] = true
		mu.Unlock()
		return nil
	})
	startWorker(t, w)
	subject := dlqNames.TaskSubject(framework.PriorityNormal, typ)
	bad := []struct {
		header, id, explains string
	}{
		{"Nats-Msg-Id", strings.Repeat("a", 4096), "4096 bytes"},
		{"Jetflow-Id", strings.Repeat("b", 60<<10), "61440 bytes"},
		{"Jetflow-Id", "a b", "' '"},
		{"Jetflow-Id", "all.*", "'.'"},
		{"Nats-Msg-Id", "x>", "'>'"},
	}
	seqs := make(map[uint64]string)
	for _, b := range bad {
		seq := e.publishRaw(t, subject, nats.Header{b.header: []string{b.id}}, []byte(`{}`))
		seqs[seq] = b.explains
	}
	good := e.enqueue(t, typ, 1)
	dls := e.waitDeadLetters(t, len(bad))
	testutil.Wait(t, waitLong, "good task ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return ran[good.ID]
	})
	for _, d := range dls {
		explains, ok := seqs[d.OriginalSeq]
		if !ok {
			t.Errorf("unexpected record %+v", d)
			continue
		}
		if d.Reason != dlq.ReasonInvalid || d.TaskID != fmt.Sprintf("seq-%d", d.OriginalSeq) ||
			!strings.Contains(d.LastError, explains) || d.Deliveries != 1 {
			t.Errorf("record of seq %d: reason %q id %q deliveries %d error %q (want %q in it)", d.OriginalSeq,
				d.Reason, d.TaskID, d.Deliveries, d.LastError, explains)
		}
	}
	mu.Lock()
	if len(ran) != 1 {
		t.Errorf("handler ran for %d tasks, want only the good one: %v", len(ran), len(ran))
	}
	mu.Unlock()
	if !nc.IsConnected() {
		t.Errorf("worker connection %v", nc.Status())
	}
	testutil.Wait(t, waitLong, "task stream empty", func() bool { return e.taskStreamMsgs(t) == 0 })
}

// Finding 5: a task whose headers come close to the server's 64 KiB limit
// still fits in a dead-letter record: its largest headers are left out of
// the record and named in Jetflow-Headers-Omitted.
func TestDeadLetterRecordFitsNearHeaderLimit(t *testing.T) {
	t.Parallel()
	const typ = "hostile.bigheaders"
	e := newEnv(t)
	w := e.worker(t)
	w.HandleFunc(typ, func(context.Context, *framework.Task) error {
		return framework.Permanent(errors.New("refused"))
	})
	startWorker(t, w)
	h := nats.Header{}
	h.Set("Jetflow-Id", "big-1")
	h.Set("Nats-Msg-Id", "big-1") // a task no schedule fired claims its message ID only
	h.Set("X-Big", strings.Repeat("x", 65000))
	h.Set("X-Small", "kept")
	e.publishRaw(t, dlqNames.TaskSubject(framework.PriorityNormal, typ), h, []byte(`"payload"`))
	dls := e.waitDeadLetters(t, 1)
	d := dls[0]
	if d.TaskID != "big-1" || d.Reason != dlq.ReasonPermanent || string(d.Payload) != `"payload"` {
		t.Errorf("record: id %q reason %q payload %q", d.TaskID, d.Reason, d.Payload)
	}
	if got := d.Headers.Get(dlq.HeaderHeadersOmitted); got != "X-Big" {
		t.Errorf("%s = %q, want X-Big", dlq.HeaderHeadersOmitted, got)
	}
	if d.Headers.Get("X-Big") != "" || d.Headers.Get("X-Small") != "kept" {
		t.Errorf("record headers: X-Big %d bytes, X-Small %q", len(d.Headers.Get("X-Big")), d.Headers.Get("X-Small"))
	}
	testutil.Wait(t, waitLong, "task stream empty", func() bool { return e.taskStreamMsgs(t) == 0 })
}

// Finding 7: a payload marked raw bytes cannot feed a typed handler of
// another type; it is a decode failure, not JSON by accident.
func TestRawPayloadOnTypedHandlerIsDecodeError(t *testing.T) {
	t.Parallel()
	const typ = "hostile.raw"
	e := newEnv(t)
	var runs atomic.Int32
	w := e.worker(t)
	framework.Handle(w, typ, func(context.Context, *framework.Task, struct{ N int }) error {
		runs.Add(1)
		return nil
	})
	startWorker(t, w)
	h := nats.Header{}
	h.Set("Jetflow-Id", "raw-1")
	h.Set("Nats-Msg-Id", "raw-1") // a task no schedule fired claims its message ID only
	h.Set(framework.HeaderEncoding, "raw")
	e.publishRaw(t, dlqNames.TaskSubject(framework.PriorityNormal, typ), h, []byte(`{"N":1}`))
	d := e.waitDeadLetters(t, 1)[0]
	if d.Reason != dlq.ReasonDecode || d.TaskID != "raw-1" {
		t.Errorf("record: reason %q id %q", d.Reason, d.TaskID)
	}
	if n := runs.Load(); n != 0 {
		t.Errorf("handler ran %d times", n)
	}
}

// Finding 8: a task that reaches its work subject before its due time (the
// server may fire a schedule slightly early) is held until then; never
// started early. Published straight to the work subject, it arrives a whole
// second early, so a worker without the hold would start it at once.
func TestTaskArrivingEarlyIsHeldUntilDue(t *testing.T) {
	t.Parallel()
	const typ = "hostile.early"
	e := newEnv(t)
	w := e.worker(t)
	started := make(chan time.Time, 1)
	w.HandleFunc(typ, func(context.Context, *framework.Task) error {
		started <- time.Now()
		return nil
	})
	startWorker(t, w)
	due := time.Now().Add(time.Second)
	h := nats.Header{}
	h.Set("Jetflow-Id", "early-1")
	h.Set("Nats-Msg-Id", "early-1") // a task no schedule fired claims its message ID only
	h.Set(framework.HeaderScheduledFor, due.UTC().Format(time.RFC3339Nano))
	e.publishRaw(t, dlqNames.TaskSubject(framework.PriorityNormal, typ), h, nil)
	at := testutil.Recv(t, started, waitLong, "task start")
	if at.Before(due) {
		t.Errorf("task started %v before its due time", due.Sub(at))
	}
	if n := w.Stats().HeldEarly; n != 1 {
		t.Errorf("Stats.HeldEarly = %d, want 1", n)
	}
}

// Finding 6: tasks on work subjects no consumer reads (a type nobody
// registered, an upper-case type published by another tool) are reported
// by subject with their age; served subjects are not.
func TestStrandedTasksAreReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	block := make(chan struct{})
	w.HandleFunc("stranded.served", func(ctx context.Context, _ *framework.Task) error {
		select {
		case <-block:
		case <-ctx.Done():
		}
		return nil
	})
	w.HandleFunc("stranded.ord", noopHandler, framework.WithOrdering(framework.Ordering{Partitions: 4}))
	startWorker(t, w)
	defer close(block)
	e.enqueue(t, "stranded.served", 1)
	e.enqueue(t, "stranded.nobody", 1)
	e.enqueue(t, "stranded.nobody", 2)
	e.publishRaw(t, "jetflow.task.low.Upper.Case", nil, []byte(`{}`))
	// Slot subjects of ordered tasks that no partition reads: a slot out of
	// range, no slot at all, a type nobody serves.
	e.publishRaw(t, "jetflow.ord.stranded.ord.999", nil, []byte(`{}`))
	e.publishRaw(t, "jetflow.ord.stranded.ord", nil, []byte(`{}`))
	e.publishRaw(t, "jetflow.ord.ord.nobody.3", nil, []byte(`{}`))
	wantType := map[string]string{
		"jetflow.ord.stranded.ord.999": "_invalid", "jetflow.ord.stranded.ord": "_invalid", "jetflow.ord.ord.nobody.3": "ord.nobody",
	}
	got, err := inspect.New(e.cl).Stranded(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{
		dlqNames.TaskSubject(framework.PriorityNormal, "stranded.nobody"): 2,
		"jetflow.task.low.Upper.Case":                                     1,
		"jetflow.ord.stranded.ord.999":                                    1,
		"jetflow.ord.stranded.ord":                                        1,
		"jetflow.ord.ord.nobody.3":                                        1,
	}
	if len(got) != len(want) {
		t.Fatalf("Stranded = %+v, want the subjects %v", got, want)
	}
	for _, s := range got {
		if want[s.Subject] != s.Tasks || s.Oldest.IsZero() || s.Age < 0 {
			t.Errorf("stranded %+v, want %d tasks with their age", s, want[s.Subject])
		}
	}
	// An hour's grace keeps them; none keeps nothing.
	if n, err := dlq.New(e.cl).MoveStranded(t.Context(), time.Hour); err != nil || n != 0 {
		t.Errorf("MoveStranded(1h) = %d, %v; want 0", n, err)
	}
	n, err := dlq.New(e.cl).MoveStranded(t.Context(), 0)
	if err != nil || n != 6 {
		t.Fatalf("MoveStranded(0) = %d, %v; want 6", n, err)
	}
	for _, d := range e.waitDeadLetters(t, 6) {
		if d.Reason != dlq.ReasonStranded || want[d.OriginalSubject] == 0 || d.RoutedBy != "operator" ||
			!strings.Contains(d.LastError, d.OriginalSubject) {
			t.Errorf("record %+v", d)
		}
		if typ, ok := wantType[d.OriginalSubject]; ok && d.Type != typ {
			t.Errorf("record of %s: type %q, want %q", d.OriginalSubject, d.Type, typ)
		}
	}
	if got, err := inspect.New(e.cl).Stranded(t.Context()); err != nil || len(got) != 0 {
		t.Errorf("Stranded after moving = %+v, %v", got, err)
	}
}

// Finding 6: plain messages on schedule and cron subjects are not
// schedules: they are reported as junk, not counted as delayed tasks or
// working repeating schedules; a cron subject is listed broken.
func TestJunkOnScheduleSubjectsIsReported(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.cl.Enqueue(t.Context(), "junk.real", 1, framework.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.publishRaw(t, "jetflow.sched.junk", nil, []byte("x"))
	e.publishRaw(t, "jetflow.cron.junk", nil, []byte("x"))
	st, err := inspect.New(e.cl).QueueStats(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Scheduled != 1 || st.Cron != 0 || st.Junk != 2 || len(st.JunkSubjects) != 2 {
		t.Errorf("QueueStats: scheduled %d cron %d junk %d %v; want 1, 0, 2", st.Scheduled, st.Cron, st.Junk, st.JunkSubjects)
	}
	// The cron subject is listed as that schedule, broken (issue 38).
	list, err := schedule.New(e.cl).List(t.Context())
	if err != nil || len(list) != 1 || list[0].Name != "junk" || list[0].Broken == "" {
		t.Errorf("Schedules.List = %+v, %v; want junk, broken", list, err)
	}
}
