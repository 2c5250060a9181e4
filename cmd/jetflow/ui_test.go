package main

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestUICommand serves the dashboard for a running server: the page and
// /metrics with the queue gauges of a task a worker is running.
func TestUICommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	defer close(release)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("emails.send", func(ctx context.Context, _ *framework.Task) error {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		})
	})
	if _, err := e.cl.Enqueue(t.Context(), "emails.send", "hi"); err != nil {
		t.Fatal(err)
	}
	out, stop := start(t, "-s", e.url, "ui", "--listen", "127.0.0.1:0")
	defer stop()
	var base string
	testutil.Wait(t, waitLong, "the dashboard's address", func() bool {
		m := regexp.MustCompile(`Dashboard: (http://\S+)/ `).FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	get := func(path string) string {
		t.Helper()
		req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
		}
		return string(b)
	}
	if page := get("/"); !strings.Contains(page, "<html") {
		t.Fatalf("GET /: no page:\n%.300s", page)
	}
	want := regexp.MustCompile(`(?m)^jetflow_queue_pending_acks\{[^}]*type="emails\.send"[^}]*\} 1$`)
	testutil.Wait(t, waitLong, "/metrics showing the running emails.send task", func() bool {
		return want.MatchString(get("/metrics"))
	})
	if r := stop(); r.code != exitOK {
		t.Fatalf("ui exit %d: %s", r.code, r.stderr)
	}
}
