package ratelimit_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitLong bounds every wait of the tests: generous, so that busy machines
// do not cause flakes; a correct run never gets near it.
const waitLong = 20 * time.Second

// env is one embedded server with the topology ensured.
type env struct {
	srv *testutil.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	cl  *framework.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	te := testutil.NewEnv(t, streams.Config{})
	cl, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: te.Server, nc: te.Conn, js: te.JS, cl: cl}
}

// worker returns a worker on its own connection with rate limits
// installed, configured by opts.
func (e *env) worker(t *testing.T, opts ...ratelimit.Option) *framework.Worker {
	t.Helper()
	w, err := framework.NewWorker(testutil.Connect(t, e.srv))
	if err != nil {
		t.Fatal(err)
	}
	if err := ratelimit.Install(w, opts...); err != nil {
		t.Fatal(err)
	}
	return w
}

// startWorker starts w and shuts it down at cleanup.
func startWorker(t *testing.T, w *framework.Worker) { t.Helper(); testutil.StartWorker(t, w) }

// enqueue enqueues a task and fails the test on error.
func (e *env) enqueue(t *testing.T, taskType string, payload any, opts ...framework.EnqueueOption) framework.TaskInfo {
	t.Helper()
	info, err := e.cl.Enqueue(t.Context(), taskType, payload, opts...)
	if err != nil {
		t.Fatalf("enqueue %s: %v", taskType, err)
	}
	return info
}
