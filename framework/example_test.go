package framework_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// exampleServer starts an embedded server with the topology ensured and
// returns a client and a cleanup function. Examples have no *testing.T, so
// they use testutil.StartServer with a directory of their own.
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

type invoice struct {
	Number string  `json:"number"`
	Amount float64 `json:"amount"`
}

func Example() {
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

	// Create the streams once, at deployment or start-up.
	js, _ := jetstream.New(nc)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		fmt.Println(err)
		return
	}

	// A worker with a typed handler.
	w, err := framework.NewWorker(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	sent := make(chan string, 1)
	framework.Handle(w, "invoices.send", func(ctx context.Context, t *framework.Task, inv invoice) error {
		sent <- fmt.Sprintf("sent invoice %s for %.2f (task %s, %s priority)", inv.Number, inv.Amount, t.ID, t.Priority)
		return nil
	})
	if err := w.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer w.Shutdown(ctx)

	// A producer enqueues a task.
	cl, err := framework.NewClient(nc)
	if err != nil {
		fmt.Println(err)
		return
	}
	info, err := cl.Enqueue(ctx, "invoices.send", invoice{Number: "INV-7", Amount: 99.5},
		framework.WithID("inv-7"), framework.WithPriority(framework.PriorityHigh))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("enqueued on", info.Subject)
	fmt.Println(<-sent)
	// Output:
	// enqueued on jetflow.task.high.invoices.send
	// sent invoice INV-7 for 99.50 (task inv-7, high priority)
}

func ExampleClient_Enqueue_delayed() {
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
	cl, _ := framework.NewClient(nc)

	info, err := cl.Enqueue(ctx, "reminders.send", map[string]string{"to": "ada"},
		framework.WithID("reminder-1"), framework.In(time.Hour))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("waiting on", info.Subject, "for about", time.Until(info.ScheduledFor).Round(time.Hour))

	// Changed our mind: the reminder never runs.
	fmt.Println("cancel:", cl.Cancel(ctx, "reminder-1"))
	fmt.Println("cancel again:", cl.Cancel(ctx, "reminder-1"))
	// Output:
	// waiting on jetflow.delay.reminder-1 for about 1h0m0s
	// cancel: <nil>
	// cancel again: framework: not found: task reminder-1 has no pending schedule
}

// EnqueueSeq enqueues jobs made as they are published, for batches too
// large to hold in memory: each result is reported as it is settled.
func ExampleClient_EnqueueSeq() {
	ctx := context.Background()
	emb, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer emb.Close()
	nc := emb.Conn
	cl, _ := framework.NewClient(nc)

	// A million rows would do the same in a window's worth of memory.
	rows := func(yield func(framework.TaskSpec) bool) {
		for i := range 1000 {
			if !yield(framework.TaskSpec{Type: "rows.import", Payload: map[string]int{"row": i}}) {
				return
			}
		}
	}
	stored := 0
	failed := cl.EnqueueSeq(ctx, rows, func(i int, info framework.TaskInfo, err error) {
		if err != nil {
			fmt.Println("row", i, "failed:", err) // retry it, log it, …
			return
		}
		stored++
	})
	fmt.Println("stored", stored, "failed", failed)
	// Output:
	// stored 1000 failed 0
}

func ExamplePermanent() {
	err := framework.Permanent(fmt.Errorf("card %s declined", "4242"))
	fmt.Println(framework.IsPermanent(err))
	fmt.Println(err)
	fmt.Println(framework.IsPermanent(fmt.Errorf("wrapped: %w", err)))
	fmt.Println(framework.Permanent(nil) == nil)
	// Output:
	// true
	// permanent: card 4242 declined
	// true
	// true
}

func ExampleBackoffPolicy_Delay() {
	p := framework.BackoffPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Randomization: -1}
	for attempt := 1; attempt <= 6; attempt++ {
		fmt.Println(attempt, p.Delay(attempt))
	}
	// Output:
	// 1 100ms
	// 2 200ms
	// 3 400ms
	// 4 800ms
	// 5 1s
	// 6 1s
}

func ExampleChain() {
	logStep := func(name string) framework.Middleware {
		return func(next framework.Handler) framework.Handler {
			return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
				fmt.Println("enter", name)
				defer fmt.Println("leave", name)
				return next.Handle(ctx, t)
			})
		}
	}
	h := framework.Chain(framework.HandlerFunc(func(context.Context, *framework.Task) error {
		fmt.Println("handler")
		return nil
	}), logStep("outer"), logStep("inner"))
	_ = h.Handle(context.Background(), &framework.Task{})
	// Output:
	// enter outer
	// enter inner
	// handler
	// leave inner
	// leave outer
}
