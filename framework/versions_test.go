package framework_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// Two versions of one payload, as two builds of a program declare them.
type chargeV1 struct {
	Order string `json:"order"`
}

func (chargeV1) TaskType() string    { return "versions.charge" }
func (chargeV1) PayloadVersion() int { return 1 }

type chargeV2 struct {
	Order    string `json:"order"`
	Currency string `json:"currency"`
}

func (chargeV2) TaskType() string    { return "versions.charge" }
func (chargeV2) PayloadVersion() int { return 2 }

type ran struct {
	worker  string
	attempt int
	version int
	payload chargeV2
}

// A v2 task reaches a worker whose handler takes v1 only: the worker hands
// it back without running it and without spending an attempt, and it runs
// on the v2 worker started later, on its first attempt, with its payload
// whole.
func TestPayloadVersionHandedBackWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := make(chan ran, 4)
	old := e.worker(t)
	framework.HandleArgs(old, func(_ context.Context, task *framework.Task, a chargeV1) error {
		runs <- ran{worker: "v1", attempt: task.Attempt, version: task.PayloadVersion()}
		return nil
	}, framework.WithMaxAttempts(2))
	startWorker(t, old)

	info, err := e.cl.EnqueueArgs(t.Context(), chargeV2{Order: "o-1", Currency: "EUR"})
	if err != nil {
		t.Fatal(err)
	}
	// Handed back three times: more than its two attempts.
	testutil.Wait(t, waitLong, "the v1 worker handed the v2 task back three times", func() bool {
		return old.Stats().VersionsHandedBack >= 3
	})
	if st := old.Stats(); st.Started != 0 {
		t.Fatalf("the v1 worker ran %d handlers", st.Started)
	}

	nw := e.worker(t)
	framework.HandleArgs(nw, func(_ context.Context, task *framework.Task, a chargeV2) error {
		runs <- ran{worker: "v2", attempt: task.Attempt, version: task.PayloadVersion(), payload: a}
		return nil
	}, framework.WithMaxAttempts(2))
	startWorker(t, nw)
	r := testutil.Recv(t, runs, waitLong, "the v2 task ran")
	if r.worker != "v2" || r.attempt != 1 || r.version != 2 || r.payload != (chargeV2{Order: "o-1", Currency: "EUR"}) {
		t.Errorf("ran %+v, want on the v2 worker, attempt 1, version 2, payload whole", r)
	}
	if dead := e.deadLetters(t); len(dead) != 0 {
		t.Errorf("dead letters: %+v", dead)
	}
	e.waitSettled(t, info.Type, framework.PriorityNormal)
	select {
	case again := <-runs:
		t.Errorf("ran twice: %+v", again)
	default:
	}
}

// A version no live worker accepts is dead-lettered with reason "version"
// once the grace has passed, not before; a replay keeps its version and
// gets a fresh grace.
func TestPayloadVersionNobodyAcceptsIsDeadLetteredAfterTheGrace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const grace = 2 * time.Second
	w := e.worker(t, framework.WithTimings(framework.Timings{VersionGrace: grace}), framework.WithTimings(framework.Timings{RegistryInterval: time.Second}))
	w.HandleFunc("versions.old", func(context.Context, *framework.Task) error { return nil }, framework.AcceptVersions(1, 2))
	startWorker(t, w)
	start := time.Now()
	info := e.enqueue(t, "versions.old", "x", framework.PayloadVersion(3))
	var dead []dlq.Record
	testutil.Wait(t, waitLong, "the task dead-lettered", func() bool {
		dead = e.deadLetters(t)
		return len(dead) > 0
	})
	d := dead[0]
	if d.Reason != dlq.ReasonVersion || d.TaskID != info.ID || !strings.Contains(d.LastError, "version 3") {
		t.Errorf("dead letter %+v, want reason version for task %s", d, info.ID)
	}
	if took := time.Since(start); took < grace {
		t.Errorf("dead-lettered after %v, before the grace of %v", took, grace)
	}
	if d.Headers.Get(framework.HeaderPayloadVersion) != "3" {
		t.Errorf("the record lost the version header: %v", d.Headers)
	}
	if st := w.Stats(); st.Started != 0 || st.VersionsHandedBack < 2 {
		t.Errorf("stats %+v: want no handler run and the task handed back before the grace", st)
	}
}

// A version header that is not a version fails the task as invalid; a
// handler without declared versions takes every version, headers or not.
func TestPayloadVersionHeaderFromTheWire(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all := make(chan int, 4)
	w := e.worker(t)
	w.HandleFunc("versions.strict", func(context.Context, *framework.Task) error { return nil }, framework.AcceptVersions(1))
	w.HandleFunc("versions.any", func(_ context.Context, task *framework.Task) error {
		all <- task.PayloadVersion()
		return nil
	})
	startWorker(t, w)
	for _, v := range []string{"abc", "0", "70000", "+1"} {
		m := &nats.Msg{Subject: "jetflow.task.normal.versions.strict", Data: []byte("{}"), Header: nats.Header{}}
		m.Header.Set(jetstream.MsgIDHeader, "bad-"+strings.Trim(v, "+"))
		m.Header.Set(framework.HeaderPayloadVersion, v)
		if _, err := e.js.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	var dead []dlq.Record
	testutil.Wait(t, waitLong, "four invalid versions dead-lettered", func() bool {
		dead = e.deadLetters(t)
		return len(dead) == 4
	})
	for _, d := range dead {
		if d.Reason != dlq.ReasonInvalid || !strings.Contains(d.LastError, framework.HeaderPayloadVersion) {
			t.Errorf("dead letter %s: reason %s, error %q; want invalid naming the header", d.TaskID, d.Reason, d.LastError)
		}
	}
	e.enqueue(t, "versions.any", "x", framework.PayloadVersion(7))
	e.enqueue(t, "versions.any", "x")
	got := []int{testutil.Recv(t, all, waitLong, "v7"), testutil.Recv(t, all, waitLong, "v1")}
	if !(got[0] == 7 && got[1] == 1 || got[0] == 1 && got[1] == 7) {
		t.Errorf("versions %v, want 7 and 1", got)
	}
}

// Bad versions from callers get a clear error and store nothing.
func TestPayloadVersionOptions(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, v := range []int{0, -1, framework.MaxPayloadVersion + 1} {
		_, err := e.cl.Enqueue(t.Context(), "versions.opt", "x", framework.PayloadVersion(v))
		if !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("PayloadVersion(%d): %v, want ErrInvalidOption", v, err)
		}
	}
	if n := e.taskStreamMsgs(t); n != 0 {
		t.Errorf("%d tasks stored", n)
	}
	for _, vs := range [][]int{nil, {0}, {1, framework.MaxPayloadVersion + 1}} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "version") {
					t.Errorf("AcceptVersions(%v): panic %v, want one naming the version", vs, r)
				}
			}()
			e.worker(t).HandleFunc("versions.opt", func(context.Context, *framework.Task) error { return nil }, framework.AcceptVersions(vs...))
		}()
	}
}
