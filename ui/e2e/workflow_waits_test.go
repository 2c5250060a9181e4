package e2e

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/ui"
	"github.com/jetflow-io/jetflow/workflow"
)

// The run page says what a sleeping step waits for (its wake time) and what
// a waiting step waits for (its event key and deadline), and follows the
// run when the event comes.
func TestRunPageWaits(t *testing.T) {
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	def := workflow.New("pay")
	workflow.Sleep(def, "cool-off", time.Hour)
	workflow.WaitEvent(def, "paid", func(ctx context.Context, id string) (string, error) { return "payment.confirmed." + id, nil },
		workflow.Timeout(2*time.Hour))
	workflow.Step(def, "ship", func(ctx context.Context, id string) (int, error) { return 1, nil }, workflow.After("paid"))
	w, err := framework.NewWorker(testutil.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	workflow.Register(w, def)
	testutil.StartWorker(t, w)
	wc, err := workflow.NewClient(cl, def)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.Start(t.Context(), "pay", "o-7", workflow.WithRunID("run-7")); err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(nc, ui.Options{RefreshInterval: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)

	ctx := browser(t)
	pageAt(t, ctx, web.URL+"/ops/#/workflows/run-7", "workflows")
	waitJS(t, ctx, `(document.querySelector('tr[data-step="paid"] [data-field="waits"]') || {}).textContent?.startsWith("event payment.confirmed.o-7, until ")`, "the waiting step's key and deadline")
	waitJS(t, ctx, `(document.querySelector('tr[data-step="cool-off"] [data-field="waits"]') || {}).textContent?.startsWith("wake at ")`, "the sleeping step's wake time")
	if got := text(t, ctx, `#dag [data-step="paid"]`); !strings.Contains(got, "waiting · payment.confirm") {
		t.Errorf("graph node of the waiting step: %q", got)
	}
	if _, err := wc.Signal(t.Context(), "payment.confirmed.o-7", nil); err != nil {
		t.Fatal(err)
	}
	waitJS(t, ctx, `(document.querySelector('#dag [data-step="ship"]') || {dataset: {}}).dataset.state === "done"`, "the run resumed")
	if got := text(t, ctx, `tr[data-step="paid"] [data-field="waits"]`); got != "" {
		t.Errorf("the resumed step still shows %q", got)
	}
}
