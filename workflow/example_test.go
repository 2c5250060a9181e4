package workflow_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
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
	dir, err := os.MkdirTemp("", "jetflow-workflow-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	srv, err := testutil.StartServer(&server.Options{JetStream: true, StoreDir: dir, DontListen: true, NoLog: true, NoSigs: true})
	if err != nil {
		panic(err)
	}
	defer testutil.ShutdownServer(srv)
	nc, err := testutil.ConnectServer(srv)
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		panic(err)
	}
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		panic(err)
	}

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
