package faulttest

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

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

// syncBuffer is a bytes.Buffer safe for a process's output and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKilledWorkerProcessTasksRunElsewhere runs tasks in a separate worker
// process, kills it with SIGKILL while the tasks run, and checks that
// another worker runs every one of them once their ack wait passes.
func TestKilledWorkerProcessTasksRunElsewhere(t *testing.T) {
	t.Parallel()
	killedWorkerProcess(t, 1)
}

// TestKilledWorkerProcessPartitioned is the kill -9 of a worker process on
// a deployment of three task partitions: the killed process held tasks of
// every partition, and another worker runs each of them.
func TestKilledWorkerProcessPartitioned(t *testing.T) {
	t.Parallel()
	killedWorkerProcess(t, 3)
}

func killedWorkerProcess(t *testing.T, partitions int) {
	const (
		tasks   = 6
		typ     = "fault.work"
		ackWait = 2 * time.Second
	)
	bin := buildTestWorker(t)
	srv := testutil.RunServer(t, testutil.WithListen())
	nc, js := testutil.JetStream(t, srv)
	ensure(t, js, 1, partitions)
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	announced := make(chan *nats.Msg, tasks)
	sub, err := nc.ChanSubscribe("jetflow.test.started", announced)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	var stderr syncBuffer
	cmd := exec.Command(bin, "-url", srv.ClientURL(), "-type", typ, "-ack-wait", ackWait.String(),
		"-concurrency", fmt.Sprint(tasks))
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start worker process: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	l := newLedger()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	stored := map[string]bool{}
	for i := range tasks {
		id := fmt.Sprintf("kill-%d", i)
		info, err := cl.Enqueue(ctx, typ, nil, framework.WithID(id))
		if err != nil {
			t.Fatal(err)
		}
		stored[info.Stream] = true
		l.enqueued(id)
	}
	if partitions > 1 && len(stored) < 2 {
		t.Fatalf("the tasks were stored in %v, want partitions spread", stored)
	}
	for range tasks {
		select {
		case m := <-announced:
			l.ran(string(m.Data))
		case err := <-exited:
			t.Fatalf("worker process exited early: %v\n%s", err, stderr.String())
		case <-time.After(time.Minute):
			t.Fatalf("worker process did not start the tasks\n%s", stderr.String())
		}
	}

	if err := cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9: %v", err)
	}
	killed := time.Now()
	if err := testutil.Recv(t, exited, 30*time.Second, "worker process exit"); err == nil {
		t.Fatal("worker process exited cleanly after SIGKILL")
	}
	exited <- nil // for the cleanup

	var (
		mu      sync.Mutex
		rerun   time.Duration
		attempt = make(map[string]int)
	)
	w := newWorker(t, testutil.Connect(t, srv), framework.WithHooks(framework.Hooks{
		Finished: func(_ context.Context, task *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionAck {
				l.success(task.ID)
			}
		},
	}))
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		l.ran(task.ID)
		mu.Lock()
		rerun = max(rerun, time.Since(killed))
		attempt[task.ID] = task.Attempt
		mu.Unlock()
		return nil
	}, framework.WithAckWait(ackWait))
	start(t, w)

	l.enqueueingDone()
	waitDone(t, l, time.Minute)
	rep := l.report()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("kill -9 worker process: %v; last task rerun %v after the kill (ack wait %v)", rep, rerun.Round(time.Millisecond), ackWait)
	if rep.Lost != 0 {
		t.Errorf("lost: %v", rep.LostIDs)
	}
	for id, a := range attempt {
		if a < 2 {
			t.Errorf("task %s ran elsewhere as attempt %d, want ≥ 2 (the killed process had it)", id, a)
		}
	}
	if rep.Duplicates != tasks {
		t.Errorf("%d extra executions, want exactly %d (one rerun per killed task)", rep.Duplicates, tasks)
	}
}
