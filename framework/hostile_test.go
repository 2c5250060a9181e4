package framework_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
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
		if d.Reason != framework.DeadLetterMaxDeliveries || d.Type != typ {
			t.Errorf("record %d: reason %q type %q", d.Seq, d.Reason, d.Type)
		}
	}
	testutil.Wait(t, waitLong, "task stream empty", func() bool { return e.taskStreamMsgs(t) == 0 })
	// The operations API reads the records back despite their headers.
	for _, d := range dls {
		if _, err := e.cl.DeadLetters().Get(t.Context(), d.Seq); err != nil {
			t.Errorf("Get(%d): %v", d.Seq, err)
		}
	}
}
