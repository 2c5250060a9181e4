package fairness_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/fairness"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// A tenant with a backlog and a tenant with one task: the second one's
// task starts in the first round, not after the backlog.
func Example() {
	ctx := context.Background()
	env, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		panic(err)
	}
	defer env.Close()
	client, err := framework.NewClient(env.Conn)
	if err != nil {
		panic(err)
	}
	for i := range 100 {
		if _, err := fairness.Enqueue(ctx, client, "report.build", i, "big-tenant"); err != nil {
			panic(err)
		}
	}
	if _, err := fairness.Enqueue(ctx, client, "report.build", 0, "small-tenant"); err != nil {
		panic(err)
	}

	w, err := framework.NewWorker(env.Conn, framework.WithConcurrency(1))
	if err != nil {
		panic(err)
	}
	if err := fairness.Install(w); err != nil {
		panic(err)
	}
	var mu sync.Mutex
	started := 0
	done := make(chan int, 1)
	framework.Handle(w, "report.build", func(_ context.Context, t *framework.Task, _ int) error {
		mu.Lock()
		defer mu.Unlock()
		started++
		if t.Key() == "small-tenant" {
			done <- started
		}
		return nil
	}, fairness.Shares(fairness.Options{Depth: 4}))
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	defer func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_ = w.Shutdown(sctx)
	}()
	fmt.Println("small tenant's task started within the first round:", <-done <= 4)
	// Output: small tenant's task started within the first round: true
}
