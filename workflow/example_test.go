package workflow_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// A two-step chain on an embedded server: the second step reads the output
// of the first.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, stop := exampleServer(ctx)
	defer stop()

	def := workflow.New("greet")
	workflow.Step(def, "name", func(ctx context.Context, in string) (string, error) {
		return strings.ToUpper(in), nil
	})
	workflow.Step(def, "greet", func(ctx context.Context, in string) (string, error) {
		name, err := workflow.Output[string](ctx, "name")
		return "hello, " + name, err
	}, workflow.After("name"))

	w, err := framework.NewWorker(nc)
	if err != nil {
		panic(err)
	}
	workflow.Register(w, def)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	fc, err := framework.NewClient(nc)
	if err != nil {
		panic(err)
	}
	wf, err := workflow.NewClient(fc, def)
	if err != nil {
		panic(err)
	}
	id, err := wf.Start(ctx, "greet", "ada")
	if err != nil {
		panic(err)
	}
	run, err := wf.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, string(run.Step("greet").Output))
	// Output: completed "hello, ADA"
}

// With WithChaining the steps after the first run on the first step's task:
// the run document is written after each step, but only one task is
// delivered.
func ExampleWithChaining() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, stop := exampleServer(ctx)
	defer stop()

	def := workflow.New("ingest", workflow.WithChaining())
	workflow.Step(def, "fetch", func(ctx context.Context, url string) (string, error) {
		return "<p>" + url + "</p>", nil
	})
	workflow.Step(def, "parse", func(ctx context.Context, _ string) (int, error) {
		page, err := workflow.Output[string](ctx, "fetch")
		return len(page), err
	}, workflow.After("fetch"))

	var tasks atomic.Int32
	w, err := framework.NewWorker(nc, framework.WithHooks(framework.Hooks{
		Started: func(context.Context, *framework.Task) { tasks.Add(1) },
	}))
	if err != nil {
		panic(err)
	}
	workflow.Register(w, def)
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	fc, err := framework.NewClient(nc)
	if err != nil {
		panic(err)
	}
	wf, err := workflow.NewClient(fc, def)
	if err != nil {
		panic(err)
	}
	id, err := wf.Start(ctx, "ingest", "example.com")
	if err != nil {
		panic(err)
	}
	run, err := wf.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, string(run.Step("parse").Output), run.Step("parse").Chained, tasks.Load())
	// Output: completed 18 true 1
}

// exampleServer starts an embedded server with the topology ensured and
// returns a connection to it, and a function that stops both.
func exampleServer(ctx context.Context) (*nats.Conn, func()) {
	dir, err := os.MkdirTemp("", "jetflow-workflow-example-")
	if err != nil {
		panic(err)
	}
	srv, err := testutil.StartServer(&server.Options{JetStream: true, StoreDir: dir, DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	nc, err := testutil.ConnectServer(srv)
	if err != nil {
		panic(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		panic(err)
	}
	return nc, func() {
		nc.Close()
		testutil.ShutdownServer(srv)
		os.RemoveAll(dir)
	}
}
