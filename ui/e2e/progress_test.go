package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/ui"
)

// The task page shows a running task's progress, follows it as the
// handler reports more, and keeps the last value once the task succeeded.
// State tracking is off: the reports alone make the records.
func TestTaskPageProgress(t *testing.T) {
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	w, err := framework.NewWorker(testutil.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	step := make(chan int64)
	w.HandleFunc("export.rows", func(ctx context.Context, task *framework.Task) error {
		for done := range step {
			if err := framework.ReportProgress(ctx, done, 12, "exporting rows"); err != nil {
				return err
			}
		}
		return nil
	})
	testutil.StartWorker(t, w)
	h, err := ui.New(nc, ui.Options{RefreshInterval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)

	if _, err := cl.Enqueue(t.Context(), "export.rows", nil, framework.WithID("exp1")); err != nil {
		t.Fatal(err)
	}
	step <- 3
	ctx := browser(t)
	pageAt(t, ctx, web.URL+"/ops/#/task/exp1", "task")
	waitJS(t, ctx, `(document.getElementById("task-progress") || {}).textContent === " 3 of 12 (25%) · exporting rows"`, "progress 3 of 12")
	if got := text(t, ctx, `[data-field="State"]`); got != "running" {
		t.Fatalf("state %q while running", got)
	}
	waitJS(t, ctx, `document.querySelector("#task-progress progress").value === 3 && document.querySelector("#task-progress progress").max === 12`, "progress bar at 3 of 12")

	// Later reports reach the page as it refreshes.
	step <- 9
	waitJS(t, ctx, `(document.getElementById("task-progress") || {}).textContent === " 9 of 12 (75%) · exporting rows"`, "progress 9 of 12")
	close(step)
	waitJS(t, ctx, `(document.querySelector('[data-field="State"]') || {}).textContent === "succeeded"`, "succeeded")
	if got := text(t, ctx, "#task-progress"); got != "9 of 12 (75%) · exporting rows" {
		t.Fatalf("progress of the finished task %q", got)
	}
}
