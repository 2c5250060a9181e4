package framework_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/health"
	"github.com/jetflow-io/jetflow/testutil"
)

// signalHandler is a slog handler that reports each record whose message
// contains match on a channel.
type signalHandler struct {
	match string
	ch    chan struct{}
}

func (h *signalHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *signalHandler) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h *signalHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *signalHandler) WithGroup(string) slog.Handler      { return h }

// Finding 9: a connection closed for good makes Run return an error
// wrapping ErrNotConnected, instead of leaving a process that lives but
// consumes nothing.
func TestRunReturnsWhenConnectionClosed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, framework.WithShutdownTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	w.HandleFunc("live.closed", func(context.Context, *framework.Task) error {
		close(started)
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(t.Context()) }()
	e.enqueue(t, "live.closed", 1)
	select {
	case <-started:
	case <-time.After(waitLong):
		t.Fatal("worker never ran a task")
	}
	if r := health.Check(t.Context(), w); !r.Live {
		t.Errorf("Health while running: not live: %v", r.Problems)
	}
	nc.Close()
	if r := health.Check(t.Context(), w); r.Live {
		t.Errorf("Health after the connection closed: live")
	}
	select {
	case err := <-done:
		if !errors.Is(err, framework.ErrNotConnected) {
			t.Fatalf("Run = %v, want ErrNotConnected", err)
		}
	case <-time.After(waitLong):
		t.Fatal("Run still running after its connection closed for good")
	}
}

// Finding 9: a worker started while the server is down waits for it, with
// backoff, and runs tasks once it is back.
func TestRunWaitsForUnreachableServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testutil.WithListen())
	nc := testutil.Connect(t, e.srv)
	waiting := &signalHandler{match: "waiting for NATS", ch: make(chan struct{}, 1)}
	w, err := framework.NewWorker(nc, framework.WithLogger(slog.New(waiting)))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan string, 1)
	w.HandleFunc("live.later", func(_ context.Context, task *framework.Task) error {
		ran <- task.ID
		return nil
	})
	testutil.ShutdownServer(e.srv.Server)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = w.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case <-waiting.ch:
	case <-done:
		t.Fatalf("Run returned %v while the server was down", runErr)
	case <-time.After(waitLong):
		t.Fatal("worker never reported waiting for NATS")
	}
	srv := testutil.RestartServer(t, e.srv)
	cl, err := framework.NewClient(testutil.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cl.Enqueue(t.Context(), "live.later", 1)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		if id != info.ID {
			t.Fatalf("ran %s, want %s", id, info.ID)
		}
	case <-done:
		t.Fatalf("Run returned %v", runErr)
	case <-time.After(waitLong):
		t.Fatal("task never ran after the server came back")
	}
}

// Finding 10: a pull request that dies with its server (here: the server
// restarts; in a cluster: the consumer leader crashes) is detected from
// its missing heartbeats or the server's status, counted in
// Stats.PullsLost, reported to the PullLost hook and replaced: the worker
// runs tasks enqueued afterwards.
func TestLostPullIsReportedAndReplaced(t *testing.T) {
	t.Parallel()
	const typ = "live.pull"
	e := newEnv(t, testutil.WithListen())
	lost := make(chan string, 16)
	w := e.worker(t, framework.WithHooks(framework.Hooks{
		PullLost: func(_ context.Context, taskType string, p framework.Priority) {
			select {
			case lost <- taskType + "/" + p.String():
			default:
			}
		},
	}))
	ran := make(chan string, 1)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		ran <- task.ID
		return nil
	}, framework.WithServedPriorities(framework.PriorityNormal))
	startWorker(t, w)
	// The worker's pull request must be waiting on the server before it
	// goes down; one sent later would reach the restarted server intact.
	testutil.Wait(t, waitLong, "pull request waiting", func() bool {
		return e.consumerInfo(t, typ, framework.PriorityNormal).NumWaiting > 0
	})
	srv := testutil.RestartServer(t, e.srv)
	got := testutil.Recv(t, lost, waitLong, "PullLost hook")
	if got != typ+"/normal" {
		t.Errorf("PullLost for %s, want %s/normal", got, typ)
	}
	if n := w.Stats().PullsLost; n == 0 {
		t.Errorf("Stats.PullsLost = 0 after a lost pull")
	}
	cl, err := framework.NewClient(testutil.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cl.Enqueue(t.Context(), typ, 1)
	if err != nil {
		t.Fatal(err)
	}
	if id := testutil.Recv(t, ran, waitLong, "task after the restart"); id != info.ID {
		t.Errorf("ran %s, want %s", id, info.ID)
	}
}
