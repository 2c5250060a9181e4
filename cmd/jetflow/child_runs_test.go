package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// TestWorkflowsGetChildRun: workflows get shows the child run a step waits
// for, and the parent of a child run.
func TestWorkflowsGetChildRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	inner := workflow.New("inner")
	workflow.Sleep(inner, "nap", time.Hour)
	outer := workflow.New("outer")
	workflow.Child(outer, "sub", inner, func(ctx context.Context, _ struct{}) (struct{}, error) { return struct{}{}, nil })
	e.worker(t, func(w *framework.Worker) { workflow.Register(w, outer, inner) })
	wc, err := workflow.NewClient(e.cl, outer)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.Start(t.Context(), "outer", nil, workflow.WithRunID("p-1")); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "the parent waits for its child", func() bool {
		r, err := wc.Status(t.Context(), "p-1")
		return err == nil && r.Step("sub").State == workflow.StepChildRunning
	})
	out := e.ok(t, nil, "workflows", "get", "p-1").stdout
	if !regexp.MustCompile(`(?m)^sub\s+-\s+child_running\s+1\s+child p-1=sub\b`).MatchString(out) {
		t.Errorf("parent's table:\n%s", out)
	}
	out = e.ok(t, nil, "workflows", "get", "p-1=sub").stdout
	if !strings.Contains(out, "child of run p-1 of outer, step sub\n") {
		t.Errorf("child run:\n%s", out)
	}
	var runs []struct{ ID string }
	e.ok(t, &runs, "workflows", "ls", "--workflow", "inner", "--json")
	if len(runs) != 1 || runs[0].ID != "p-1=sub" {
		t.Errorf("child runs listed: %+v", runs)
	}
}

// TestStepWaitsChild: a step waiting for its child run names it.
func TestStepWaitsChild(t *testing.T) {
	t.Parallel()
	st := workflow.StepStatus{State: workflow.StepChildRunning, ChildRun: "order-1=quote"}
	if got := stepWaits(&st, time.Now()); got != "child order-1=quote" {
		t.Errorf("stepWaits = %q", got)
	}
	r := &workflow.Run{Steps: []*workflow.StepStatus{{State: workflow.StepDone}, &st}}
	if got := runWaits(r, time.Now()); got != "child order-1=quote" {
		t.Errorf("runWaits = %q", got)
	}
}
