package main

import (
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/testutil"
)

// dashboardURL waits for the address a serving command prints.
func dashboardURL(t *testing.T, out *syncBuffer) string {
	t.Helper()
	var base string
	testutil.Wait(t, waitLong, "the dashboard address", func() bool {
		m := regexp.MustCompile(`Dashboard(?: \(read-only\))?: (http://\S+)/ `).FindStringSubmatch(out.String())
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	return base
}

// TestUIReadOnly refuses mutations from a --read-only dashboard, and a
// listen address that cannot be used fails with a hint.
func TestUIReadOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.ok(t, nil, "pause", "emails.send", "--priority", "normal") // a queue to act on
	out, stop := start(t, "-s", e.url, "ui", "--listen", "127.0.0.1:0", "--read-only")
	base := dashboardURL(t, out)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, base+"/api/queues/emails.send/normal/resume", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Jetflow-Request", "1")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("resume on a read-only dashboard: %s", resp.Status)
	}
	if r := stop(); r.code != exitOK {
		t.Fatalf("ui exit %d: %s", r.code, r.stderr)
	}
	var st statusJSON
	e.ok(t, &st, "status", "--json")
	if q := st.queue("emails.send", "normal"); q == nil || !q.Paused {
		t.Fatalf("the read-only dashboard resumed the queue: %+v", q)
	}
	e.fails(t, exitFailed, `listen on 256\.0\.0\.1:1.*--listen`, "ui", "--listen", "256.0.0.1:1")
}

// TestDevDashboard starts the development server with its dashboard.
func TestDevDashboard(t *testing.T) {
	t.Parallel()
	out, stop := start(t, "dev", "--port", "-1", "--store", filepath.Join(t.TempDir(), "store"), "--listen", "127.0.0.1:0")
	base := dashboardURL(t, out)
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "jetflow_") {
		t.Fatalf("GET /metrics: %s\n%s", resp.Status, body)
	}
	if r := stop(); r.code != exitOK {
		t.Fatalf("dev exit %d: %s", r.code, r.stderr)
	}
}

// TestUIRefusesOtherHosts answers only requests for localhost, an IP
// address, the listen host and --allow-host names: a page whose name was
// rebound to 127.0.0.1 is same-origin with the dashboard, so its requests
// carry the dashboard's custom header, but they name the page's host.
func TestUIRefusesOtherHosts(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out, stop := start(t, "-s", e.url, "ui", "--listen", "127.0.0.1:0", "--allow-host", "ops.example")
	base := dashboardURL(t, out)
	port := base[strings.LastIndexByte(base, ':')+1:]
	do := func(method, path, host string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(`{"all":true}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("X-Jetflow-Request", "1")
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, c := range []struct {
		method, path, host string
		want               int
	}{
		{http.MethodGet, "/", "attacker.example:" + port, http.StatusForbidden},
		{http.MethodGet, "/api/overview", "attacker.example:" + port, http.StatusForbidden},
		{http.MethodPost, "/api/dlq/purge", "attacker.example:" + port, http.StatusForbidden},
		{http.MethodPost, "/api/dlq/purge", "Attacker.Example.", http.StatusForbidden},
		{http.MethodGet, "/", "localhost:" + port, http.StatusOK},
		{http.MethodGet, "/", "127.0.0.1:" + port, http.StatusOK},
		{http.MethodGet, "/", "[::1]:" + port, http.StatusOK},
		{http.MethodGet, "/", "OPS.example:" + port, http.StatusOK},
		{http.MethodPost, "/api/dlq/purge", "localhost:" + port, http.StatusOK},
	} {
		if got := do(c.method, c.path, c.host); got != c.want {
			t.Errorf("%s %s for Host %s: %d, want %d", c.method, c.path, c.host, got, c.want)
		}
	}
	if r := stop(); r.code != exitOK {
		t.Fatalf("ui exit %d: %s", r.code, r.stderr)
	}
}
