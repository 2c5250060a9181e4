package inspect_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func ExampleOperator_ListTasks() {
	ctx := context.Background()
	emb, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer emb.Close()
	nc := emb.Conn
	cl, _ := framework.NewClient(nc)
	for _, id := range []string{"mail-1", "mail-2"} {
		if _, err := cl.Enqueue(ctx, "email.send", nil, framework.WithID(id)); err != nil {
			fmt.Println(err)
			return
		}
	}
	if _, err := cl.Enqueue(ctx, "email.send", nil, framework.WithID("mail-3"), framework.In(time.Hour)); err != nil {
		fmt.Println(err)
		return
	}

	o := inspect.New(cl)
	waiting, _ := o.ListTasks(ctx, inspect.TaskFilter{Type: "email.send"})
	for _, t := range waiting {
		fmt.Println(t.State, t.ID, t.Subject)
	}
	delayed, _ := o.ListTasks(ctx, inspect.TaskFilter{State: framework.StateScheduled})
	for _, t := range delayed {
		fmt.Println(t.State, t.ID, "due in about", time.Until(t.DueAt).Round(time.Hour))
	}
	// No worker serves email.send yet: its subject is stranded.
	ov, _ := o.Overview(ctx)
	for _, q := range ov.Queues {
		fmt.Println(q.Type, q.Priority, "waiting", q.Waiting, "scheduled", q.Scheduled, "stranded", q.Stranded)
	}
	// Output:
	// pending mail-1 jetflow.task.normal.email.send
	// pending mail-2 jetflow.task.normal.email.send
	// scheduled mail-3 due in about 1h0m0s
	// email.send normal waiting 2 scheduled 1 stranded true
}
