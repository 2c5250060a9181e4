package faulttest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// cutEnv is a server, a worker connected through a proxy that can cut its
// network, and a direct client.
type cutEnv struct {
	srv          *testutil.Server
	proxy        *testutil.Proxy
	cl           *framework.Client
	disconnected chan struct{}
	reconnected  chan struct{}
}

func newCutEnv(t *testing.T) *cutEnv {
	t.Helper()
	srv := testutil.RunServer(t, testutil.WithListen())
	nc, js := testutil.JetStream(t, srv)
	ensure(t, js, 1)
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &cutEnv{
		srv:          srv,
		proxy:        testutil.NewProxy(t, srv.Addr().String()),
		cl:           cl,
		disconnected: make(chan struct{}, 16),
		reconnected:  make(chan struct{}, 16),
	}
}

// proxiedConn connects through the proxy, reporting disconnects and reconnects.
func (e *cutEnv) proxiedConn(t *testing.T) *nats.Conn {
	t.Helper()
	nc, err := nats.Connect(e.proxy.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond),
		nats.DisconnectErrHandler(func(*nats.Conn, error) { e.disconnected <- struct{}{} }),
		nats.ReconnectHandler(func(*nats.Conn) { e.reconnected <- struct{}{} }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// runs counts the executions of each task and signals every start.
type runs struct {
	mu      sync.Mutex
	by      map[string][]string // task ID -> worker names, in start order
	started chan string         // worker name
}

func newRuns() *runs { return &runs{by: make(map[string][]string), started: make(chan string, 16)} }

func (r *runs) add(id, worker string) {
	r.mu.Lock()
	r.by[id] = append(r.by[id], worker)
	r.mu.Unlock()
	r.started <- worker
}

func (r *runs) of(id string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.by[id]...)
}

const (
	cutAckWait   = 3 * time.Second
	cutHeartbeat = 300 * time.Millisecond
)

// TestNetworkCutShorterThanAckWait cuts a worker's network for a second in
// the middle of a long task: the heartbeats it could not send go out on
// reconnection, well within the ack wait, so the task is not redelivered and
// runs once.
func TestNetworkCutShorterThanAckWait(t *testing.T) {
	t.Parallel()
	const typ = "fault.cut"
	e := newCutEnv(t)
	r := newRuns()
	release := make(chan struct{})
	done := make(chan string, 4)
	w := newWorker(t, e.proxiedConn(t), framework.WithHooks(framework.Hooks{
		Finished: func(_ context.Context, task *framework.Task, o framework.Outcome) {
			if o.Action != framework.ActionAck {
				return
			}
			done <- task.ID
		},
	}))
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		r.add(task.ID, "proxied")
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, framework.WithAckWait(cutAckWait), framework.WithHeartbeat(cutHeartbeat))
	start(t, w)

	if _, err := e.cl.Enqueue(t.Context(), typ, nil, framework.WithID("long")); err != nil {
		t.Fatal(err)
	}
	testutil.Recv(t, r.started, 30*time.Second, "task started")

	e.proxy.Cut()
	testutil.Recv(t, e.disconnected, 10*time.Second, "worker notices the cut")
	cut := time.Now()
	// The length of the outage is the fault itself, not a synchronisation.
	outage := time.NewTimer(time.Second)
	select {
	case <-outage.C:
	case <-t.Context().Done():
		t.Fatal("test ended during the outage")
	}
	e.proxy.Restore()
	testutil.Recv(t, e.reconnected, 10*time.Second, "worker reconnects")
	back := time.Since(cut)

	// Keep the task running for more than a full ack wait after the outage:
	// had the heartbeats stopped, the server would redeliver it meanwhile.
	select {
	case w := <-r.started:
		t.Fatalf("task redelivered (to the %s worker) after a %v outage shorter than the ack wait %v", w, back, cutAckWait)
	case <-time.After(cutAckWait + time.Second):
	}
	close(release)
	if id := testutil.Recv(t, done, 30*time.Second, "task acked"); id != "long" {
		t.Fatalf("acked %q", id)
	}
	if got := r.of("long"); len(got) != 1 {
		t.Fatalf("task ran %d times (%v), want once", len(got), got)
	}
	t.Logf("network cut of %v (ack wait %v, heartbeat %v): task ran once", back.Round(time.Millisecond), cutAckWait, cutHeartbeat)
}

// TestNetworkCutLongerThanAckWait cuts a worker's network during a long task
// and keeps it cut: after the ack wait the server redelivers the task to
// another worker, which runs it. When the cut worker comes back, its late
// result does not resurrect or lose the task.
func TestNetworkCutLongerThanAckWait(t *testing.T) {
	t.Parallel()
	const typ = "fault.cutlong"
	e := newCutEnv(t)
	r := newRuns()
	release := make(chan struct{})
	done := make(chan string, 4)
	hooks := framework.WithHooks(framework.Hooks{Finished: func(_ context.Context, task *framework.Task, o framework.Outcome) {
		if o.Action != framework.ActionAck {
			return
		}
		done <- task.ID
	}})
	opts := []framework.HandlerOption{framework.WithAckWait(cutAckWait), framework.WithHeartbeat(cutHeartbeat)}

	cutW := newWorker(t, e.proxiedConn(t), hooks)
	cutW.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		r.add(task.ID, "proxied")
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, opts...)
	start(t, cutW)
	if _, err := e.cl.Enqueue(t.Context(), typ, nil, framework.WithID("long")); err != nil {
		t.Fatal(err)
	}
	if w := testutil.Recv(t, r.started, 30*time.Second, "task started"); w != "proxied" {
		t.Fatalf("started on %s", w)
	}

	e.proxy.Cut()
	testutil.Recv(t, e.disconnected, 10*time.Second, "worker notices the cut")
	cut := time.Now()

	// A second worker, directly connected, gets the task once its ack wait
	// passes without heartbeats.
	other := newWorker(t, testutil.Connect(t, e.srv), hooks)
	other.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		r.add(task.ID, "direct")
		return nil
	}, opts...)
	start(t, other)
	if w := testutil.Recv(t, r.started, 30*time.Second, "task redelivered"); w != "direct" {
		t.Fatalf("redelivered to the %s worker, want the direct one", w)
	}
	redelivered := time.Since(cut)
	if id := testutil.Recv(t, done, 30*time.Second, "redelivered task acked"); id != "long" {
		t.Fatalf("acked %q", id)
	}

	e.proxy.Restore()
	testutil.Recv(t, e.reconnected, 10*time.Second, "cut worker reconnects")
	close(release)
	// The cut worker's late ack is for a delivery the server already
	// settled: the task must not come back.
	testutil.Recv(t, done, 30*time.Second, "late result settled")
	testutil.Wait(t, 10*time.Second, "task stream empty", func() bool {
		return taskStreamMsgs(t, e.cl.JetStream()) == 0
	})
	select {
	case w := <-r.started:
		t.Fatalf("task ran a third time, on the %s worker", w)
	case <-time.After(cutAckWait + time.Second):
	}
	t.Logf("network cut beyond ack wait %v: redelivered to another worker %v after the cut; runs: %v",
		cutAckWait, redelivered.Round(time.Millisecond), r.of("long"))
}
