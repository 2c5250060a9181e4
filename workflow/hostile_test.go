package workflow_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/workflow"
)

// Run documents and the run header of workflow tasks come from the wire:
// anyone who may publish on the run subjects or enqueue tasks can write
// them. A document with a null step, a step name that is no valid name, or
// an ID that is not its subject's, and a task whose run header is no valid
// run ID, fail their task for good (no retries) instead of crashing the
// worker or re-sending tasks on subjects the document chose.
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
	for i, id := range []string{"h1", "h2", "h3", "*"} {
		task := &nats.Msg{Subject: "jetflow.task.normal." + workflow.StepTaskType("repair", "a"), Header: nats.Header{}}
		task.Header.Set(jetstream.MsgIDHeader, "hostile-"+string(rune('0'+i)))
		task.Header.Set(workflow.HeaderRun, id)
		if _, err := e.js.PublishMsg(t.Context(), task); err != nil {
			t.Fatal(err)
		}
	}
	w, _ := e.worker(t, []*workflow.Definition{d}, hooks, framework.WithMiddleware(redelivered))
	startWorker(t, w)

	want := map[string]bool{"h1": true, "h2": true, "h3": true, "*": true}
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
