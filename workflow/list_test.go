package workflow_test

import (
	"context"
	"strings"
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

// Revisions written on top of a run's document replace it: List shows the
// run once, as its last revision says.
func TestListShowsLastRevision(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	d := workflow.New("stale")
	workflow.Step(d, "one", func(ctx context.Context, in int) (int, error) { return in, nil })
	c := e.client(t, d)
	id, err := c.Start(ctx, "stale", 1)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.js.Stream(ctx, "JETFLOW_RUNS")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := s.GetLastMsgForSubject(ctx, "jetflow.wf."+id)
	if err != nil {
		t.Fatal(err)
	}
	// Two more revisions of the same document; the last says the run
	// failed.
	failed := strings.Replace(string(doc.Data), `"status":"running"`, `"status":"failed"`, 1)
	for _, data := range []string{string(doc.Data), failed} {
		if _, err := e.js.Publish(ctx, "jetflow.wf."+id, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	runs, _, err := c.List(ctx, workflow.RunFilter{})
	if err != nil || len(runs) != 1 || runs[0].ID != id || runs[0].Status != workflow.RunFailed {
		t.Fatalf("List = %d runs (%v), want run %s once, failed", len(runs), err, id)
	}
	if only, _, err := c.List(ctx, workflow.RunFilter{Status: workflow.RunRunning}); err != nil || len(only) != 0 {
		t.Errorf("List running = %d runs (%v), want none: the run's last revision says failed", len(only), err)
	}
}

// List keeps the documents of the newest runs only; a run whose document it
// dropped while scanning, and that ends up among the newest because newer
// runs' last revisions do not match, is read again. The stream here keeps
// five revisions per run (a limit raised by hand), so the scan sees the
// runs replaced.
func TestListReadsAgainARunItDropped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	d := workflow.New("dropped")
	workflow.Step(d, "one", func(ctx context.Context, in int) (int, error) { return in, nil })
	c := e.client(t, d)
	s, err := e.js.Stream(ctx, "JETFLOW_RUNS")
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgsPerSubject = 5
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		id, err := c.Start(ctx, "dropped", i)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	// The two newest runs complete (as revisions on top of their documents):
	// only the oldest is running.
	for _, id := range []string{ids[2], ids[1]} {
		doc, err := s.GetLastMsgForSubject(ctx, "jetflow.wf."+id)
		if err != nil {
			t.Fatal(err)
		}
		done := strings.Replace(string(doc.Data), `"status":"running"`, `"status":"completed"`, 1)
		if _, err := e.js.Publish(ctx, "jetflow.wf."+id, []byte(done)); err != nil {
			t.Fatal(err)
		}
	}
	runs, truncated, err := c.List(ctx, workflow.RunFilter{Status: workflow.RunRunning, Limit: 1})
	if err != nil || truncated || len(runs) != 1 || runs[0].ID != ids[0] || runs[0].Status != workflow.RunRunning {
		t.Fatalf("List running, limit 1 = %d runs (%v, truncated %v), want run %s", len(runs), err, truncated, ids[0])
	}
}
