package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// A standalone registry, for calls made outside a worker's handlers.
func ExampleNew() {
	r, err := breaker.New(breaker.WithSettings("payments-gw", breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Minute}))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := breaker.ContextWithRegistry(context.Background(), r)
	down := func(context.Context) error { return errors.New("503") }
	for range 3 {
		err := breaker.Call(ctx, "payments-gw", down)
		fmt.Println(errors.Is(err, breaker.ErrOpen), err != nil)
	}
	in, _ := r.State("payments-gw")
	fmt.Println(in.State, in.Counts.ConsecutiveFailures)
	// Output:
	// false true
	// true true
	// true true
	// open 0
}

// Breakers installed on a worker: a handler calls its dependency through
// breaker.Call, and the task type declares the dependency so that an open
// breaker pauses its consumers in every worker.
func ExampleInstall() {
	ctx := context.Background()
	emb, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer emb.Close()
	nc := emb.Conn

	w, _ := framework.NewWorker(nc)
	changed := make(chan string, 4)
	_, err = breaker.Install(w,
		breaker.WithSettings("payments-gw", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}),
		breaker.WithStateChanged(func(_ context.Context, dep string, from, to breaker.State) {
			changed <- fmt.Sprint(dep, ": ", from, " -> ", to)
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	w.HandleFunc("payments.charge", func(ctx context.Context, _ *framework.Task) error {
		return breaker.Call(ctx, "payments-gw", func(context.Context) error { return errors.New("503") })
	}, breaker.WithDependencies("payments-gw"))
	if err := w.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		_ = w.Shutdown(sctx)
	}()
	cl, _ := framework.NewClient(nc)
	if _, err := cl.Enqueue(ctx, "payments.charge", nil); err != nil {
		fmt.Println(err)
		return
	}
	select {
	case s := <-changed:
		fmt.Println(s)
	case <-time.After(30 * time.Second):
		fmt.Println("no state change")
	}
	fmt.Println(breaker.Of(w).States()[0].State)
	// Output:
	// payments-gw: closed -> open
	// open
}
