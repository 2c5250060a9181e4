package health_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/health"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// Kubernetes probes for a worker: /readyz answers 200 once the worker is
// connected, its consumers exist and its fetch loops poll; /livez answers
// 503 only when a restart is the cure.
func ExampleReadinessHandler() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	emb, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer emb.Close()
	nc := emb.Conn

	w, err := framework.NewWorker(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	w.HandleFunc("emails.send", func(context.Context, *framework.Task) error { return nil })
	mux := http.NewServeMux()
	mux.Handle("/readyz", health.ReadinessHandler(w))
	mux.Handle("/livez", health.LivenessHandler(w))

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
