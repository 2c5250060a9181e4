package workflow_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/workflow"
)

// Run documents and the run header of workflow tasks come from the wire:
// anyone who may publish on the run subjects or enqueue tasks can write
// them. A document with a null step, a step name that is no valid name, an
// ID that is not its subject's or a completion out of range, and a task
// whose run header is no valid run ID, fail their task for good (no
// retries) instead of crashing the worker or re-sending tasks on subjects
// the document chose.
func TestHostileRunDocumentsFailTheirTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := newCounter()
	d := repairDef(runs)
	in := `{"id":"x","items":0}`
	docs := map[string]string{
		"h1": `{"id":"h1","workflow":"repair","status":"running","input":` + in + `,"steps":[null]}`,
		"h2": `{"id":"other","workflow":"repair","status":"running","input":` + in + `,"steps":[{"name":"a","state":"enqueued"},{"name":"b","after":["a"],"state":"pending"}]}`,
		"h3": `{"id":"h3","workflow":"repair","status":"running","input":` + in + `,"steps":[{"name":"a","state":"done","output":1,"completion":1},{"name":"b","after":["a"],"state":"pending"},{"name":"x.>","after":["a"],"state":"enqueued"}]}`,
		"h4": `{"id":"h4","workflow":"repair","status":"running","input":` + in + `,"steps":[{"name":"a","state":"enqueued"},{"name":"b","after":["a"],"state":"pending","completion":9223372036854775807}]}`,
	}
	for id, doc := range docs {
		if _, err := e.js.Publish(t.Context(), "jetflow.wf."+id, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	failed := make(chan string, 8)
	hooks := framework.WithHooks(framework.Hooks{Finished: func(ctx context.Context, t *framework.Task, o framework.Outcome) {
		if o.Action == framework.ActionFail {
			select {
			case failed <- t.Header(workflow.HeaderRun):
			case <-ctx.Done():
			}
		}
	}})
	// Step a's tasks of the three runs (h3's as a redelivery, which would
	// re-send the children the document lists), and one whose run header is
	// a wildcard matching every run's subject.
	redelivered := func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			if t.Header(workflow.HeaderRun) == "h3" {
				t.Attempt = 2
			}
			return next.Handle(ctx, t)
		})
	}
	for i, id := range []string{"h1", "h2", "h3", "h4", "*"} {
		task := &nats.Msg{Subject: "jetflow.task.normal." + workflow.StepTaskType("repair", "a"), Header: nats.Header{}}
		task.Header.Set(jetstream.MsgIDHeader, "hostile-"+string(rune('0'+i)))
		task.Header.Set(workflow.HeaderRun, id)
		if _, err := e.js.PublishMsg(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := e.worker(t, []*workflow.Definition{d}, hooks, framework.WithMiddleware(redelivered))
	startWorker(t, w)

	want := map[string]bool{"h1": true, "h2": true, "h3": true, "h4": true, "*": true}
	timeout := time.After(waitLong)
	for len(want) > 0 {
		select {
		case id := <-failed:
			if !want[id] {
				t.Fatalf("task of run %q failed, want one of %v", id, want)
			}
			delete(want, id)
		case <-timeout:
			t.Fatalf("tasks of runs %v did not fail", want)
		}
	}
	if runs.get("a") != 0 {
		t.Errorf("step a ran %d times for hostile runs", runs.get("a"))
	}
	// The worker still runs workflows, and nothing was enqueued on the
	// subject h3's document named.
	c := e.client(t, d)
	stillRunsNothingLeft(t, e, c)
}

// A run document is only acted on by the tasks of its own workflow, and only
// when its steps are the definition's: a forged task naming another
// workflow's run, or a document listing a step the definition does not have
// (or a compensation it does not declare), would otherwise run a step on a
// stranger's input and enqueue tasks of types no worker consumes, which stay
// in the task stream forever. Such tasks fail for good and the documents
// are left as they were.
func TestHostileRunDocumentsOutsideTheDefinition(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := newCounter()
	d := repairDef(runs)
	in := `{"id":"x","items":0}`
	docs := map[string]string{
		// A run of another workflow with the same step names.
		"m1": `{"id":"m1","workflow":"other","status":"running","input":` + in + `,"steps":[{"name":"a","state":"enqueued"},{"name":"b","after":["a"],"state":"pending"}]}`,
		// A step the definition does not declare, unlocked by a.
		"m2": `{"id":"m2","workflow":"repair","status":"running","input":` + in + `,"steps":[{"name":"a","state":"enqueued"},{"name":"b","after":["a"],"state":"pending"},{"name":"zzz","after":["a"],"state":"pending"}]}`,
		// A compensation the definition does not declare, started when a
		// completes late in a failed run.
		"m3": `{"id":"m3","workflow":"repair","status":"failed","input":` + in + `,"steps":[{"name":"a","state":"enqueued","compensable":true},{"name":"b","after":["a"],"state":"failed"}]}`,
		// Dependencies that are not the definition's: b would run with a.
		"m4": `{"id":"m4","workflow":"repair","status":"running","input":` + in + `,"steps":[{"name":"a","state":"enqueued"},{"name":"b","state":"enqueued"}]}`,
		// A compensation in progress the definition does not declare,
		// which a redelivered task would re-send.
		"m7": `{"id":"m7","workflow":"repair","status":"compensating","input":` + in + `,"steps":[{"name":"a","state":"compensating"},{"name":"b","after":["a"],"state":"failed"}]}`,
		// A step listed twice: the second copy would never settle.
		"m6": `{"id":"m6","workflow":"repair","status":"running","input":` + in + `,"steps":[{"name":"a","state":"enqueued"},{"name":"a","state":"enqueued"},{"name":"b","after":["a"],"state":"pending"}]}`,
	}
	for id, doc := range docs {
		if _, err := e.js.Publish(t.Context(), "jetflow.wf."+id, []byte(doc)); err != nil {
			t.Fatal(err)
		}
	}
	type result struct {
		run    string
		action framework.Action
	}
	finished := make(chan result, 16)
	hooks := framework.WithHooks(framework.Hooks{Finished: func(ctx context.Context, t *framework.Task, o framework.Outcome) {
		if o.Action == framework.ActionRetry {
			return
		}
		select {
		case finished <- result{t.Header(workflow.HeaderRun), o.Action}:
		case <-ctx.Done():
		}
	}})
	for id := range docs {
		task := &nats.Msg{Subject: "jetflow.task.normal." + workflow.StepTaskType("repair", "a"), Header: nats.Header{}}
		task.Header.Set(jetstream.MsgIDHeader, id+":a")
		task.Header.Set(workflow.HeaderRun, id)
		if _, err := e.js.PublishMsg(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
	// m7's task comes as a redelivery, which re-sends the tasks its
	// document says are queued.
	redelivered := func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			if t.Header(workflow.HeaderRun) == "m7" {
				t.Attempt = 2
			}
			return next.Handle(ctx, t)
		})
	}
	w, _ := e.worker(t, []*workflow.Definition{d}, hooks, framework.WithMiddleware(redelivered))
	startWorker(t, w)

	want := map[string]bool{"m1": true, "m2": true, "m3": true, "m4": true, "m6": true, "m7": true}
	timeout := time.After(waitLong)
	for len(want) > 0 {
		select {
		case r := <-finished:
			if !want[r.run] {
				t.Fatalf("task of run %q finished again, want one of %v", r.run, want)
			}
			if r.action != framework.ActionFail {
				t.Errorf("task of run %s: %v, want a permanent failure", r.run, r.action)
			}
			delete(want, r.run)
		case <-timeout:
			t.Fatalf("tasks of runs %v did not finish", want)
		}
	}
	if n := runs.get("a"); n != 0 {
		t.Errorf("step a ran %d times on documents outside its definition", n)
	}
	c := e.client(t, d)
	for id, doc := range docs {
		r, err := c.Status(t.Context(), id)
		if err != nil {
			t.Fatalf("status %s: %v", id, err)
		}
		if st := r.Step("a"); st == nil || (st.State != workflow.StepEnqueued && id != "m7") {
			t.Errorf("run %s: step a changed, document was %s", id, doc)
		}
	}
	// Cancelling with compensation a run whose document declares a
	// compensation the definition does not have is refused.
	doc := `{"id":"m5","workflow":"repair","status":"running","input":` + in + `,"steps":[{"name":"a","state":"done","output":1,"completion":1,"compensable":true},{"name":"b","after":["a"],"state":"pending"}]}`
	if _, err := e.js.Publish(t.Context(), "jetflow.wf.m5", []byte(doc)); err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(t.Context(), "m5", workflow.WithCompensation()); err == nil {
		t.Error("Cancel with compensation of a run outside its definition: nil error")
	}
	if r, err := c.Status(t.Context(), "m5"); err != nil {
		t.Fatalf("status m5: %v", err)
	} else if r.Status != workflow.RunRunning {
		t.Errorf("run m5 is %s after Cancel, want it unchanged", r.Status)
	}
	// The worker still runs workflows, and no task was left on a subject
	// that no consumer covers.
	stillRunsNothingLeft(t, e, c)
}

// Errors often carry what an external service answered (a response body):
// a step or compensation error larger than the server's max payload would
// make the run document unwritable. The failure must still be recorded (with
// the error cut short), so that the run fails and compensates instead of
// staying running with its step retried.
func TestHugeStepErrorsAreRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	huge := strings.Repeat("x", 2<<20)
	var runs, undos atomic.Int32
	d := workflow.New("huge-error")
	workflow.Step(d, "a", func(ctx context.Context, o order) (int, error) {
		return 1, nil
	}, workflow.Compensate(func(ctx context.Context, o order, out int) error {
		undos.Add(1)
		return framework.Permanent(errors.New("undo: " + huge))
	}))
	workflow.Step(d, "b", func(ctx context.Context, o order) (int, error) {
		runs.Add(1)
		return 0, framework.Permanent(errors.New("declined: " + huge))
	}, workflow.After("a"), workflow.WithTaskOptions(framework.WithMaxAttempts(3), fast))
	c := e.run(t, d)
	r := wait(t, c, start(t, c, "huge-error", order{ID: "x"}))
	if r.Status != workflow.RunFailed {
		t.Fatalf("run %s (%.80s), want failed", r.Status, r.Error)
	}
	checkState(t, r, "a", workflow.StepCompensationFailed)
	checkState(t, r, "b", workflow.StepFailed)
	if n := runs.Load(); n != 1 {
		t.Errorf("step b ran %d times, want once (its error is permanent)", n)
	}
	if n := undos.Load(); n != 1 {
		t.Errorf("compensation of a ran %d times, want once (its error is permanent)", n)
	}
	if st := r.Step("b"); !strings.Contains(st.Error, "declined: xxx") || len(st.Error) > 4096 {
		t.Errorf("step b's error is %d bytes (%.40q…)", len(st.Error), st.Error)
	}
}

// stillRunsNothingLeft checks, after hostile runs, that the worker still
// runs a repair workflow to its end and that no task is left in the task
// stream (none on a subject no consumer covers).
func stillRunsNothingLeft(t *testing.T, e *env, c *workflow.Client) {
	t.Helper()
	if r := wait(t, c, start(t, c, "repair", order{ID: "ok"})); r.Status != workflow.RunCompleted {
		t.Fatalf("run after the hostile ones: %s (%s)", r.Status, r.Error)
	}
	s, err := e.js.Stream(t.Context(), "JETFLOW_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter("jetflow.task.>"))
	if err != nil {
		t.Fatal(err)
	}
	for subj := range info.State.Subjects {
		t.Errorf("task left on %s", subj)
	}
}
