package workflow_test

import (
	"context"
	"testing"

	"github.com/jetflow-io/jetflow/workflow"
)

func TestListRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	a := workflow.New("lista")
	workflow.Step(a, "one", func(ctx context.Context, in int) (int, error) { return in, nil })
	b := workflow.New("listb")
	workflow.Step(b, "one", func(ctx context.Context, in int) (int, error) { return in, nil })
	c := e.client(t, a, b)

	// No worker runs: the runs stay running, in start order.
	var ids []string
	for i, wf := range []string{"lista", "listb", "lista"} {
		id, err := c.Start(ctx, wf, i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	runs, truncated, err := c.List(ctx, workflow.RunFilter{})
	if err != nil || truncated {
		t.Fatalf("list: %v truncated %v", err, truncated)
	}
	if len(runs) != 3 || runs[0].ID != ids[2] || runs[2].ID != ids[0] {
		t.Fatalf("want newest first %v, got %d runs", ids, len(runs))
	}
	if r := runs[1]; r.Workflow != "listb" || r.Status != workflow.RunRunning || len(r.Steps) != 1 || r.Steps[0].State != workflow.StepEnqueued {
		t.Errorf("run %+v", r)
	}
	only, _, err := c.List(ctx, workflow.RunFilter{Workflow: "listb"})
	if err != nil || len(only) != 1 || only[0].ID != ids[1] {
		t.Errorf("workflow filter: %v %d", err, len(only))
	}
	limited, truncated, err := c.List(ctx, workflow.RunFilter{Limit: 2})
	if err != nil || len(limited) != 2 || !truncated || limited[0].ID != ids[2] {
		t.Errorf("limit: %v %d truncated %v", err, len(limited), truncated)
	}
	none, _, err := c.List(ctx, workflow.RunFilter{Status: workflow.RunCompleted})
	if err != nil || len(none) != 0 {
		t.Errorf("status filter: %v %d", err, len(none))
	}
}
