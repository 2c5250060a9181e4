package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestWorkersKilledProcessLeavesRegistry runs three worker processes of
// one type, kills one with SIGKILL, and checks that `jetflow workers` drops
// it within its record's TTL (three registry intervals) and `jetflow status`
// shows two live workers on the type's queue; then that a worker shut down
// cleanly leaves at once.
func TestWorkersKilledProcessLeavesRegistry(t *testing.T) {
	t.Parallel()
	const (
		typ      = "fleet.work"
		interval = time.Second
		ttl      = 3 * interval // fleet.TTL(interval)
	)
	bin := buildTestWorker(t)
	e := newEnv(t)
	procs := make(map[string]*exec.Cmd)
	for _, id := range []string{"w1", "w2", "w3"} {
		procs[id] = startTestWorker(t, bin, e.url, "-type", typ, "-id", id, "-registry-interval", interval.String())
	}
	var f inspect.Fleet
	testutil.Wait(t, time.Minute, "three workers listed", func() bool {
		f = inspect.Fleet{}
		e.ok(t, &f, "workers", "--json", "--type", typ)
		return len(f.Workers) == 3
	})
	for _, w := range f.Workers {
		if w.PID != procs[w.ID].Process.Pid || w.TTL != ttl || len(w.Types) != 1 || w.Types[0].Type != typ {
			t.Errorf("worker %+v: want PID %d, TTL %v, type %s", w, procs[w.ID].Process.Pid, ttl, typ)
		}
	}
	if out := e.ok(t, nil, "workers").stdout; strings.Count(out, typ+" (critical,high,normal,low)") != 3 {
		t.Errorf("workers table:\n%s", out)
	}

	if err := procs["w2"].Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = procs["w2"].Wait()
	testutil.Wait(t, ttl+30*time.Second, "killed worker dropped", func() bool {
		f = inspect.Fleet{}
		e.ok(t, &f, "workers", "--json")
		return len(f.Workers) == 2
	})
	gone := time.Since(killed)
	t.Logf("killed worker dropped from the registry %v after SIGKILL (record TTL %v)", gone.Round(10*time.Millisecond), ttl)
	// The record was written at most one interval before the kill and lives
	// ttl after that write; a second covers the server's expiry and the
	// polling.
	if gone > ttl+time.Second {
		t.Errorf("killed worker listed %v after SIGKILL, beyond its TTL %v", gone, ttl)
	}
	for _, w := range f.Workers {
		if w.ID == "w2" {
			t.Errorf("killed worker still listed: %+v", f.Workers)
		}
	}
	var st struct {
		Queues []struct {
			Type, Priority string
			Workers        int
		}
	}
	e.ok(t, &st, "status", "--json", "--type", typ)
	for _, q := range st.Queues {
		if q.Workers != 2 {
			t.Errorf("status: queue %s/%s shows %d workers, want 2", q.Type, q.Priority, q.Workers)
		}
	}
	if len(st.Queues) != 4 {
		t.Errorf("status: %d queues of %s, want 4", len(st.Queues), typ)
	}

	// A clean shutdown deletes the record at once.
	if err := procs["w3"].Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := procs["w3"].Wait(); err != nil {
		t.Fatalf("w3 exit: %v", err)
	}
	f = inspect.Fleet{}
	e.ok(t, &f, "workers", "--json")
	if len(f.Workers) != 1 || f.Workers[0].ID != "w1" {
		t.Errorf("after w3 shut down: %+v", f.Workers)
	}
}

// The status table shows the worker count of each queue and flags a queue
// with waiting tasks and no live worker.
func TestStatusFlagsQueueWithoutWorker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("mail.send", func(context.Context, *framework.Task) error { return nil },
			framework.WithServedPriorities(framework.PriorityHigh))
	})
	if _, err := e.cl.Enqueue(t.Context(), "mail.send", []byte(`{}`), framework.WithPriority(framework.PriorityLow)); err != nil {
		t.Fatal(err)
	}
	var out string
	testutil.Wait(t, 30*time.Second, "worker listed", func() bool {
		out = e.ok(t, nil, "status").stdout
		return strings.Contains(out, "NO LIVE WORKER")
	})
	var high, low string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "mail.send") && strings.Contains(line, " high "):
			high = line
		case strings.HasPrefix(line, "mail.send") && strings.Contains(line, " low "):
			low = line
		}
	}
	if !strings.Contains(high, " 1 ") || strings.Contains(high, "NO LIVE WORKER") || !strings.Contains(low, "NO LIVE WORKER") {
		t.Errorf("status:\n%s", out)
	}
	if !strings.Contains(out, "1 queue(s) with waiting tasks and NO LIVE WORKER") {
		t.Errorf("status has no summary of the queue without a worker:\n%s", out)
	}
}

// buildTestWorker builds cmd/jetflow-testworker into a temporary directory.
func buildTestWorker(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go tool not found, cannot build the worker process: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "jetflow-testworker")
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, goTool, "build", "-o", bin, "github.com/jetflow-io/jetflow/cmd/jetflow-testworker").CombinedOutput()
	if err != nil {
		t.Fatalf("build jetflow-testworker: %v\n%s", err, out)
	}
	return bin
}

// startTestWorker runs the test worker against url, killed at cleanup.
func startTestWorker(t *testing.T, bin, url string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-url", url}, args...)...)
	out := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("worker %v output:\n%s", args, out)
		}
	})
	return cmd
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
