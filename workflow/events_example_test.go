package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/workflow"
)

// A run waits for the payment of its order, then sleeps a moment (a
// durable sleep, on a server-side schedule), then ships. The payment
// event is delivered before the run even starts: the event stream keeps
// it, and the wait finds it.
func ExampleWaitEvent() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, stop := exampleServer(ctx)
	defer stop()

	type payment struct{ Ref string }
	def := workflow.New("order")
	workflow.WaitEvent(def, "paid", func(ctx context.Context, orderID string) (string, error) {
		return "payment.confirmed." + orderID, nil
	}, workflow.Timeout(time.Hour))
	workflow.Sleep(def, "settle", 200*time.Millisecond, workflow.After("paid"))
	workflow.Step(def, "ship", func(ctx context.Context, orderID string) (string, error) {
		p, err := workflow.Output[payment](ctx, "paid")
		return "shipped " + orderID + " paid by " + p.Ref, err
	}, workflow.After("settle"))

	w, err := framework.NewWorker(nc)
	if err != nil {
		panic(err)
	}
	workflow.Register(w, def)
	if err := w.Start(ctx); err != nil { // creates the event streams
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

	if _, err := wf.Signal(ctx, "payment.confirmed.o-42", payment{Ref: "ch_1"}); err != nil {
		panic(err)
	}
	id, err := wf.Start(ctx, "order", "o-42")
	if err != nil {
		panic(err)
	}
	run, err := wf.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, string(run.Step("ship").Output))
	// Output: completed "shipped o-42 paid by ch_1"
}
