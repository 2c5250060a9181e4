package framework_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// Kubernetes probes for a worker: /readyz answers 200 once the worker is
// connected, its consumers exist and its fetch loops poll; /livez answers
// 503 only when a restart is the cure.
func ExampleWorker_ReadinessHandler() {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	js, _ := jetstream.New(nc)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		fmt.Println(err)
		return
	}

	w, err := framework.NewWorker(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	w.HandleFunc("emails.send", func(context.Context, *framework.Task) error { return nil })
	mux := http.NewServeMux()
	mux.Handle("/readyz", w.ReadinessHandler())
	mux.Handle("/livez", w.LivenessHandler())

	probe := func(path string) int {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	fmt.Println("before start: ready", probe("/readyz"), "live", probe("/livez"))
	if err := w.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer w.Shutdown(context.Background())
	tick := time.NewTicker(10 * time.Millisecond) // the fetch loops' first polls
	defer tick.Stop()
	for probe("/readyz") != http.StatusOK && ctx.Err() == nil {
		<-tick.C
	}
	fmt.Println("running: ready", probe("/readyz"), "live", probe("/livez"))
	// Output:
	// before start: ready 503 live 503
	// running: ready 200 live 200
}
