package breaker_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

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
	srv, cleanup, err := exampleServer()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	nc, err := testutil.ConnectServer(srv)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	ctx := context.Background()
	js, _ := jetstream.New(nc)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		fmt.Println(err)
		return
	}

	w, _ := framework.NewWorker(nc)
	changed := make(chan string, 4)
	_, err = breaker.Install(w,
		breaker.WithSettings("payments-gw", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour}),
		breaker.WithStateChanged(func(_ context.Context, dep string, from, to framework.BreakerState) {
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

// exampleServer starts an embedded server with JetStream and returns it and
// a cleanup function. Examples have no *testing.T, so they use
// testutil.StartServer with a directory of their own.
func exampleServer() (srv *server.Server, cleanup func(), err error) {
	dir, err := os.MkdirTemp("", "jetflow-example-")
	if err != nil {
		return nil, nil, err
	}
	srv, err = testutil.StartServer(&server.Options{JetStream: true, StoreDir: dir, DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return srv, func() { testutil.ShutdownServer(srv); os.RemoveAll(dir) }, nil
}
