package health_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/health"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// probe GETs url and returns the status code and the decoded report.
func probe(t *testing.T, url string) (int, health.Report) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var rep health.Report
	if err := json.NewDecoder(resp.Body).Decode(&rep); err != nil {
		t.Fatalf("%s: body is not a health report: %v", url, err)
	}
	return resp.StatusCode, rep
}

// TestWorkerHealth follows a worker's health through real faults: not
// started, ready, server stopped (live, not ready), server back (ready),
// connection closed (neither), through the method and the probe handlers.
func TestWorkerHealth(t *testing.T) {
	t.Parallel()
	e := testutil.NewEnv(t, streams.Config{}, testutil.WithListen())
	nc := e.Connect(t)
	w, err := framework.NewWorker(nc)
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("emails.send", func(context.Context, *framework.Task) error { return nil },
		framework.WithServedPriorities(framework.PriorityNormal))
	mux := http.NewServeMux()
	mux.Handle("/readyz", health.ReadinessHandler(w))
	mux.Handle("/livez", health.LivenessHandler(w))
	hs := httptest.NewServer(mux)
	defer hs.Close()

	if rep := health.Check(t.Context(), w); rep.Live || rep.Ready || !strings.Contains(strings.Join(rep.Problems, ";"), "not started") {
		t.Fatalf("before start: %+v", rep)
	}
	if code, _ := probe(t, hs.URL+"/livez"); code != http.StatusServiceUnavailable {
		t.Fatalf("livez before start: %d", code)
	}
	testutil.StartWorker(t, w)
	var rep health.Report
	testutil.Wait(t, waitLong, "the worker ready", func() bool {
		rep = health.Check(t.Context(), w)
		return rep.Ready
	})
	if !rep.Live || rep.Connection != "CONNECTED" || len(rep.Consumers) != 1 || !rep.Consumers[0].Present ||
		rep.Consumers[0].LastPoll.IsZero() || len(rep.Problems) != 0 {
		t.Fatalf("ready report: %+v", rep)
	}
	if code, r := probe(t, hs.URL+"/readyz"); code != http.StatusOK || !r.Ready {
		t.Fatalf("readyz: %d %+v", code, r)
	}

	// Fault 1: the server stops. Live (the client reconnects by itself),
	// not ready.
	port := e.Server.Addr().(*net.TCPAddr).Port
	opts := e.Server.Opts.Clone()
	opts.Port = port
	testutil.ShutdownServer(e.Server.Server)
	testutil.Wait(t, waitLong, "not ready while the server is down", func() bool {
		rep = health.Check(t.Context(), w)
		return !rep.Ready
	})
	if !rep.Live {
		t.Fatalf("server down: %+v", rep)
	}
	if code, _ := probe(t, hs.URL+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz with the server down: %d", code)
	}
	if code, _ := probe(t, hs.URL+"/livez"); code != http.StatusOK {
		t.Fatalf("livez with the server down: %d", code)
	}

	// The server comes back on the same store and port: ready again.
	srv2, err := testutil.StartServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { testutil.ShutdownServer(srv2) })
	testutil.Wait(t, waitLong, "ready after the server is back", func() bool {
		rep = health.Check(t.Context(), w)
		return rep.Ready
	})

	// Fault 2: the connection is closed for good. Neither live nor ready.
	nc.Close()
	rep = health.Check(t.Context(), w)
	if rep.Live || rep.Ready || rep.Connection != "CLOSED" {
		t.Fatalf("closed connection: %+v", rep)
	}
	if code, _ := probe(t, hs.URL+"/livez"); code != http.StatusServiceUnavailable {
		t.Fatalf("livez with a closed connection: %d", code)
	}
}

// TestStrandedInReport: ordered tasks of a type whose worker has no
// WithOrdering show in the report's Stranded and Warnings, and leave the
// worker ready (the fault is the configuration, not this worker).
func TestStrandedInReport(t *testing.T) {
	t.Parallel()
	e := testutil.NewEnv(t, streams.Config{})
	cl, err := framework.NewClient(e.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Enqueue(t.Context(), "emails.send", nil, framework.Ordered("customer-1")); err != nil {
		t.Fatal(err)
	}
	w, err := framework.NewWorker(e.Connect(t))
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("emails.send", func(context.Context, *framework.Task) error { return nil })
	testutil.StartWorker(t, w)
	var rep health.Report
	testutil.Wait(t, waitLong, "the worker ready", func() bool {
		rep = health.Check(t.Context(), w)
		return rep.Ready
	})
	if len(rep.Stranded) != 1 || rep.Stranded[0].Type != "emails.send" || rep.Stranded[0].Tasks != 1 ||
		len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "framework.WithOrdering") {
		t.Fatalf("report: stranded %+v, warnings %q", rep.Stranded, rep.Warnings)
	}
}
