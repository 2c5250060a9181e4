package testenv

import (
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// Env is one embedded server with the default topology ensured, a
// connection for the test's own use and a client on it.
type Env struct {
	*testutil.Env
	Client *framework.Client
}

// New starts the environment of one test; everything is shut down at
// cleanup.
func New(t testing.TB, opts ...testutil.ServerOption) *Env {
	t.Helper()
	te := testutil.NewEnv(t, streams.Config{}, opts...)
	cl, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return &Env{Env: te, Client: cl}
}

// Worker returns a worker on a connection of its own, not started.
func (e *Env) Worker(t testing.TB, opts ...framework.WorkerOption) *framework.Worker {
	t.Helper()
	w, err := framework.NewWorker(e.Connect(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// Enqueue enqueues a task with the environment's client and fails the test
// on error.
func (e *Env) Enqueue(t testing.TB, taskType string, payload any, opts ...framework.EnqueueOption) framework.TaskInfo {
	t.Helper()
	info, err := e.Client.Enqueue(t.Context(), taskType, payload, opts...)
	if err != nil {
		t.Fatalf("enqueue %s: %v", taskType, err)
	}
	return info
}
