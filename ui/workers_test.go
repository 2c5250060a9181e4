package ui_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/ui"
)

// The Workers API lists a running worker from the registry; the overview
// counts it on the queues it serves and flags a queue with waiting tasks
// that no live worker serves (a worker that shut down served it); the page's script has a Workers page and a
// Workers column.
func TestWorkersAPIAndQueueCounts(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	noop := func(context.Context, *framework.Task) error { return nil }
	// A worker of every priority made the consumers, then left.
	gone := e.worker(t, func(w *framework.Worker) { w.HandleFunc("mail.send", noop) })
	if err := gone.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("mail.send", noop, framework.WithServedPriorities(framework.PriorityHigh))
	})
	if _, err := e.cl.Enqueue(t.Context(), "mail.send", []byte(`{}`), framework.WithPriority(framework.PriorityLow)); err != nil {
		t.Fatal(err)
	}
	var f inspect.Fleet
	testutil.Wait(t, waitLong, "worker listed", func() bool {
		f = inspect.Fleet{}
		return e.do(t, "GET", "api/workers", "", false, &f) == 200 && len(f.Workers) == 1
	})
	if w := f.Workers[0]; !f.Registry || len(w.Types) != 1 || w.Types[0].Type != "mail.send" || w.PID == 0 {
		t.Errorf("api/workers: %+v", f)
	}
	var ov ui.Overview
	testutil.Wait(t, waitLong, "low queue listed", func() bool {
		ov = e.overview(t)
		for _, q := range ov.Queues {
			if q.Priority == "low" {
				return true
			}
		}
		return false
	})
	if !ov.Registry {
		t.Fatal("overview: registry not read")
	}
	for _, q := range ov.Queues {
		switch q.Priority {
		case "high":
			if q.Workers != 1 || q.NoWorker {
				t.Errorf("high queue: %+v", q)
			}
		case "low":
			if q.Workers != 0 || !q.NoWorker {
				t.Errorf("low queue: %+v", q)
			}
		}
	}
	res, err := http.Get(e.web.URL + "/ops/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`jetflow_workers{type="mail.send",priority="high"} 1`, `jetflow_workers{type="mail.send",priority="low"} 0`, "jetflow_workers_registry_up 1"} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("metrics lack %s:\n%s", want, metrics)
		}
	}
	var page strings.Builder
	for _, p := range []string{"", "app.js"} {
		res, err := http.Get(e.web.URL + "/ops/" + p)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("GET %s: %d %v", p, res.StatusCode, err)
		}
		page.Write(b)
	}
	for _, want := range []string{`href="#/workers"`, "pages.workers", `"data-col": "workers"`, "no-worker"} {
		if !strings.Contains(page.String(), want) {
			t.Errorf("the page lacks %s", want)
		}
	}
}
