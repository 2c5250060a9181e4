package framework_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// env is one embedded server with the topology ensured.
type env struct {
	srv *testutil.Server
	nc  *nats.Conn
	cl  *framework.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatalf("ensure: %v", err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, nc: nc, cl: cl}
}

// startWorker starts w on its own connection and shuts it down at cleanup.
func startWorker(t *testing.T, w *framework.Worker) {
	t.Helper()
	if err := w.Start(t.Context()); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
}

func (e *env) worker(t *testing.T, opts ...framework.Option) *framework.Worker {
	t.Helper()
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
