package main

import (
	"context"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// tasks get and tasks ls --state running show a running task's progress,
// and tasks get its result once it succeeded; state tracking is off.
func TestTasksShowProgress(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reported, release := make(chan error), make(chan struct{})
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("export.rows", func(ctx context.Context, task *framework.Task) error {
			reported <- framework.ReportProgress(ctx, 40, 160, "exporting rows")
			<-release
			return framework.SetResult(ctx, map[string]int{"rows": 160})
		})
	})
	if _, err := e.cl.Enqueue(t.Context(), "export.rows", nil, framework.WithID("exp1")); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Recv(t, reported, waitLong, "progress"); err != nil {
		t.Fatal(err)
	}
	var out string
	testutil.Wait(t, waitLong, "progress in tasks get", func() bool {
		out = e.ok(t, nil, "tasks", "get", "exp1").stdout
		return strings.Contains(out, "40/160 (25%) exporting rows")
	})
	var task taskView
	e.ok(t, &task, "tasks", "get", "exp1", "--json")
	if task.Record == nil || task.Record.Progress != (framework.Progress{Done: 40, Total: 160, Message: "exporting rows"}) {
		t.Fatalf("tasks get --json: record %+v", task.Record)
	}
	out = e.ok(t, nil, "tasks", "ls", "--state", "running").stdout
	if !strings.Contains(out, "PROGRESS") || !strings.Contains(out, "40/160 (25%) exporting rows") {
		t.Fatalf("tasks ls --state running:\n%s", out)
	}
	var list []listView
	e.ok(t, &list, "tasks", "ls", "--state", "running", "--json")
	if len(list) != 1 || list[0].ID != "exp1" || list[0].Progress == nil || list[0].Progress.Done != 40 {
		t.Fatalf("tasks ls --json: %+v", list)
	}
	if out = e.ok(t, nil, "tasks", "ls").stdout; strings.Contains(out, "PROGRESS") {
		t.Fatalf("tasks ls of waiting tasks has a progress column:\n%s", out)
	}

	close(release)
	if _, err := e.cl.Wait(t.Context(), "exp1"); err != nil {
		t.Fatal(err)
	}
	out = e.ok(t, nil, "tasks", "get", "exp1").stdout
	if !strings.Contains(out, `{"rows":160}`) || !strings.Contains(out, "succeeded") {
		t.Fatalf("tasks get of the finished task:\n%s", out)
	}
}
