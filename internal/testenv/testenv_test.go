package testenv_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/testutil"
)

// The environment's client enqueues into its server and a worker of it
// runs the task, on a connection of its own.
func TestEnvRunsATask(t *testing.T) {
	e := testenv.New(t)
	w := e.Worker(t)
	ran := make(chan string, 1)
	w.HandleFunc("env.check", func(_ context.Context, task *framework.Task) error {
		ran <- task.ID
		return nil
	})
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	if w.Conn() == e.Conn {
		t.Error("the worker shares the test's connection")
	}
	info := e.Enqueue(t, "env.check", map[string]int{"n": 1})
	if id := testutil.Recv(t, ran, 30*time.Second, "the task to run"); id != info.ID {
		t.Fatalf("ran %s, want %s", id, info.ID)
	}
}
