package ui_test

import (
	"context"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/ui"
)

// GET api/tasks/ID carries a running task's progress, which the task page
// shows; the final record keeps the last value.
func TestTaskProgressAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	reported, release := make(chan error), make(chan struct{})
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("export.rows", func(ctx context.Context, task *framework.Task) error {
			reported <- framework.ReportProgress(ctx, 3, 12, "exporting rows")
			<-release
			return nil
		})
	})
	if _, err := e.cl.Enqueue(t.Context(), "export.rows", nil, framework.WithID("exp1")); err != nil {
		t.Fatal(err)
	}
	if err := testutil.Recv(t, reported, waitLong, "progress"); err != nil {
		t.Fatal(err)
	}
	want := framework.Progress{Done: 3, Total: 12, Message: "exporting rows"}
	var rec framework.TaskRecord
	testutil.Wait(t, waitLong, "progress in api/tasks/exp1", func() bool {
		rec = framework.TaskRecord{}
		return e.do(t, "GET", "api/tasks/exp1", "", false, &rec) == 200 && rec.Progress == want
	})
	if rec.State != framework.StateRunning {
		t.Fatalf("record while running: %+v", rec)
	}
	close(release)
	final, err := e.cl.Wait(t.Context(), "exp1")
	if err != nil || final.Progress != want {
		t.Fatalf("final record %+v, %v", final, err)
	}
}
