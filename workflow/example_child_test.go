package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/workflow"
)

// A step that runs another workflow and waits for its result: the child
// run's ID derives from the parent's, its document names the parent, and
// the output of its last step becomes the step's output.
func ExampleChild() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nc, stop := exampleServer(ctx)
	defer stop()

	quote := workflow.New("quote")
	workflow.Step(quote, "price", func(ctx context.Context, items int) (int, error) {
		return 10 * items, nil
	})

	order := workflow.New("order")
	workflow.Child(order, "quote", quote, func(ctx context.Context, items int) (int, error) {
		return items, nil // the child's input
	})
	workflow.Step(order, "invoice", func(ctx context.Context, items int) (string, error) {
		price, err := workflow.Output[int](ctx, "quote")
		return fmt.Sprintf("%d items: %d", items, price), err
	}, workflow.After("quote"))

	w, err := framework.NewWorker(nc)
	if err != nil {
		panic(err)
	}
	workflow.Register(w, order, quote) // the child workflow runs on a worker too
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer w.Shutdown(ctx)

	fc, err := framework.NewClient(nc)
	if err != nil {
		panic(err)
	}
	wf, err := workflow.NewClient(fc, order)
	if err != nil {
		panic(err)
	}
	id, err := wf.Start(ctx, "order", 3, workflow.WithRunID("order-7"))
	if err != nil {
		panic(err)
	}
	run, err := wf.Wait(ctx, id)
	if err != nil {
		panic(err)
	}
	child, err := wf.Status(ctx, workflow.ChildRunID(id, "quote"))
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, string(run.Step("invoice").Output))
	fmt.Println(child.ID, child.Status, "parent", child.Parent.Run, child.Parent.Step)
	// Output:
	// completed "3 items: 30"
	// order-7=quote completed parent order-7 quote
}
