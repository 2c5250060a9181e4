package framework_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

type greeting struct {
	Name string `json:"name"`
}

func TestEnqueueAndHandleTyped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	got := make(chan string, 1)
	framework.Handle(w, "greet.hello", func(ctx context.Context, task *framework.Task, g greeting) error {
		got <- g.Name + "/" + task.ID
		return nil
	})
	startWorker(t, w)
	info, err := e.cl.Enqueue(t.Context(), "greet.hello", greeting{Name: "ada"}, framework.WithID("t1"))
	if err != nil {
		t.Fatal(err)
	}
	if info.ID != "t1" || info.Subject != "jetflow.task.normal.greet.hello" {
		t.Fatalf("info = %+v", info)
	}
	if v := testutil.Recv(t, got, 10*time.Second, "handler"); v != "ada/t1" {
		t.Fatalf("got %q", v)
	}
}
