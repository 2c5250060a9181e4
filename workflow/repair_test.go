package workflow_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/workflow"
)

// The tests below cover the gap between a commit's two writes (the run
// document in the run stream, then the tasks in the task stream): a crash
// between the two leaves a document that says a step is enqueued without its
// task. They build that state by hand.

func repairDef(runs *counter) *workflow.Definition {
	d := workflow.New("repair")
	workflow.Step(d, "a", func(ctx context.Context, o order) (int, error) {
		runs.inc("a")
		return 1, nil
	})
	workflow.Step(d, "b", func(ctx context.Context, o order) (int, error) {
		runs.inc("b")
		a, err := workflow.Output[int](ctx, "a")
		return a + 1, err
	}, workflow.After("a"))
	return d
}

// putRun stores r as a new run document, as a commit would.
func putRun(t *testing.T, e *env, r *workflow.Run) {
	t.Helper()
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	m := &nats.Msg{Subject: "jetflow.wf." + r.ID, Data: data, Header: nats.Header{}}
	m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	if _, err := e.js.PublishMsg(t.Context(), m); err != nil {
		t.Fatalf("store run document: %v", err)
	}
}

func TestRedeliveryResendsLostChildTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := newCounter()
	d := repairDef(runs)
	now := time.Now().UTC()
	// Step a's result was stored, b marked enqueued, then the worker died
	// before publishing b's task and acknowledging a's.
	putRun(t, e, &workflow.Run{ID: "r1", Workflow: "repair", Status: workflow.RunRunning, Input: json.RawMessage(`{"id":"x","items":0}`),
		CreatedAt: now, UpdatedAt: now, Steps: []*workflow.StepStatus{
			{Name: "a", State: workflow.StepDone, Output: json.RawMessage(`1`), Completion: 1, Attempts: 1, EnqueuedAt: now, EndedAt: now},
			{Name: "b", After: []string{"a"}, State: workflow.StepEnqueued, EnqueuedAt: now},
		}})
	// a's task comes back as a redelivery.
	redelivered := func(next framework.Handler) framework.Handler {
		return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
			if t.Type == workflow.StepTaskType("repair", "a") {
				t.Attempt = 2
			}
			return next.Handle(ctx, t)
		})
	}
	task := &nats.Msg{Subject: "jetflow.task.normal." + workflow.StepTaskType("repair", "a"), Header: nats.Header{}}
	task.Header.Set(jetstream.MsgIDHeader, "r1:a")
	task.Header.Set(workflow.HeaderRun, "r1")
	if _, err := e.js.PublishMsg(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	w, _ := e.worker(t, []*workflow.Definition{d}, framework.WithMiddleware(redelivered))
	startWorker(t, w)
	c := e.client(t, d)

	r := wait(t, c, "r1")
	if r.Status != workflow.RunCompleted || string(r.Step("b").Output) != "2" {
		t.Fatalf("run %s (%s), b output %s", r.Status, r.Error, r.Step("b").Output)
	}
	if runs.get("a") != 0 || runs.get("b") != 1 {
		t.Fatalf("executions a=%d b=%d, want 0 and 1", runs.get("a"), runs.get("b"))
	}
}

func TestStartAgainResendsLostRootTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	runs := newCounter()
	d := repairDef(runs)
	now := time.Now().UTC()
	// Start stored the document, then the producer died before publishing
	// the first task.
	putRun(t, e, &workflow.Run{ID: "r2", Workflow: "repair", Status: workflow.RunRunning, Input: json.RawMessage(`{"id":"x","items":0}`),
		CreatedAt: now, UpdatedAt: now, Steps: []*workflow.StepStatus{
			{Name: "a", State: workflow.StepEnqueued, EnqueuedAt: now},
			{Name: "b", After: []string{"a"}, State: workflow.StepPending},
		}})
	w, _ := e.worker(t, []*workflow.Definition{d})
	startWorker(t, w)
	c := e.client(t, d)

	id, err := c.Start(t.Context(), "repair", order{ID: "x"}, workflow.WithRunID("r2"))
	if !errors.Is(err, workflow.ErrRunExists) || id != "r2" {
		t.Fatalf("Start again: %q, %v; want r2 and ErrRunExists", id, err)
	}
	r := wait(t, c, "r2")
	if r.Status != workflow.RunCompleted || runs.get("a") != 1 || runs.get("b") != 1 {
		t.Fatalf("run %s (%s), executions a=%d b=%d", r.Status, r.Error, runs.get("a"), runs.get("b"))
	}
}
