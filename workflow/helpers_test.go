package workflow_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// waitLong bounds every wait: generous for busy machines, never reached by
// a correct run.
const waitLong = 30 * time.Second

// fast retries quickly, so that retry tests do not wait for the default
// one-second backoff.
var fast = framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond})

// env is one embedded server with the topology ensured.
type env struct {
	srv *testutil.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	fc  *framework.Client
}

// newEnv starts a server with file-storage streams.
func newEnv(t *testing.T) *env { return newEnvStorage(t, jetstream.FileStorage) }

// commitModes are the storages the tests run on. (Until decision 023 they
// were two ways of committing a run document with its tasks: one after the
// other on file storage, in one atomic batch on memory storage.)
var commitModes = []struct {
	name    string
	storage jetstream.StorageType
}{
	{"sequenced", jetstream.FileStorage},
	{"atomic", jetstream.MemoryStorage},
}

// forModes runs test once per commit mode, in parallel subtests.
func forModes(t *testing.T, test func(t *testing.T, e *env)) {
	t.Helper()
	for _, m := range commitModes {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			test(t, newEnvStorage(t, m.storage))
		})
	}
}

func newEnvStorage(t *testing.T, storage jetstream.StorageType) *env {
	t.Helper()
	te := testutil.NewEnv(t, streams.Config{Storage: storage})
	fc, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: te.Server, nc: te.Conn, js: te.JS, fc: fc}
}

func (e *env) client(t *testing.T, defs ...*workflow.Definition) *workflow.Client {
	t.Helper()
	c, err := workflow.NewClient(e.fc, defs...)
	if err != nil {
		t.Fatalf("workflow client: %v", err)
	}
	return c
}

// worker returns a worker on its own connection with defs registered, not
// started. Its connection is closed at cleanup.
func (e *env) worker(t *testing.T, defs []*workflow.Definition, opts ...framework.WorkerOption) (*framework.Worker, *nats.Conn) {
	t.Helper()
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	workflow.Register(w, defs...)
	return w, nc
}

// startWorker starts w and shuts it down at cleanup.
func startWorker(t *testing.T, w *framework.Worker) {
	t.Helper()
	testutil.StartWorker(t, w)
}

// run starts a worker for defs and returns a client for them.
func (e *env) run(t *testing.T, defs ...*workflow.Definition) *workflow.Client {
	t.Helper()
	w, _ := e.worker(t, defs)
	startWorker(t, w)
	return e.client(t, defs...)
}

func start(t *testing.T, c *workflow.Client, name string, input any, opts ...workflow.StartOption) string {
	t.Helper()
	id, err := c.Start(t.Context(), name, input, opts...)
	if err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	return id
}

// wait waits until run id reaches a final status.
func wait(t *testing.T, c *workflow.Client, id string) *workflow.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	r, err := c.Wait(ctx, id)
	if err != nil {
		t.Fatalf("wait for run %s: %v", id, err)
	}
	return r
}

// waitStatus waits until cond holds for the document of run id.
func waitStatus(t *testing.T, c *workflow.Client, id, what string, cond func(*workflow.Run) bool) *workflow.Run {
	t.Helper()
	var r *workflow.Run
	testutil.Wait(t, waitLong, what, func() bool {
		var err error
		r, err = c.Status(t.Context(), id)
		if err != nil {
			t.Fatalf("status %s: %v", id, err)
		}
		return cond(r)
	})
	return r
}

// counter counts executions by key.
type counter struct {
	mu sync.Mutex
	m  map[string]int
}

func newCounter() *counter { return &counter{m: make(map[string]int)} }

func (c *counter) inc(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m[key]++
	return c.m[key]
}

func (c *counter) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[key]
}

// log records an ordered sequence of events.
type log struct {
	mu sync.Mutex
	l  []string
}

func (l *log) add(s string) {
	l.mu.Lock()
	l.l = append(l.l, s)
	l.mu.Unlock()
}

func (l *log) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.l...)
}

// stepKey identifies one step of one run in a counter.
func stepKey(ctx context.Context) string {
	info, _ := workflow.Info(ctx)
	return info.RunID + "/" + info.Step
}

func checkState(t *testing.T, r *workflow.Run, step string, want workflow.StepState) {
	t.Helper()
	st := r.Step(step)
	if st == nil {
		t.Fatalf("run %s has no step %s", r.ID, step)
	}
	if st.State != want {
		t.Errorf("step %s is %s, want %s (error %q)", step, st.State, want, st.Error)
	}
}

// r3Cluster starts a three-node cluster with the topology ensured at R3,
// and returns it with connect, which opens a connection to node i that
// reconnects for ever and closes at cleanup.
func r3Cluster(t *testing.T) (*testutil.Cluster, func(i int) *nats.Conn) {
	t.Helper()
	c := testutil.RunCluster(t, 3)
	urls := c.ClientURLs()
	connect := func(i int) *nats.Conn {
		nc, err := nats.Connect(urls[i], nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	_, js := c.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	return c, connect
}
