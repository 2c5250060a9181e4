package framework_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestShutdownWithBlockedOrderedTask stops a worker while it holds an
// ordered task whose key is blocked: Shutdown returns within its deadline.
func TestShutdownWithBlockedOrderedTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	w.HandleFunc("order.stuck", func(context.Context, *framework.Task) error {
		return errors.New("declined")
	}, framework.WithOrdering(framework.Ordering{Partitions: 1, BlockOnDeadLetter: true}), framework.WithMaxAttempts(1))
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	id := e.enqueue(t, "order.stuck", []byte("x"), framework.Ordered("k")).ID
	ins := inspect.New(e.cl)
	testutil.Wait(t, waitLong, "task blocked", func() bool {
		bs, err := ins.BlockedTasks(t.Context())
		return err == nil && len(bs) == 1 && bs[0].TaskID == id
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Shutdown(ctx) }()
	select {
	case <-done:
	case <-time.After(waitLong):
		t.Fatal("Shutdown did not return within its deadline")
	}
}
