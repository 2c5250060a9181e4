package schedule_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func ExampleManager_Register() {
	ctx := context.Background()
	emb, err := testutil.StartEmbedded(ctx, streams.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer emb.Close()
	nc := emb.Conn
	cl, _ := framework.NewClient(nc)
	s := schedule.New(cl)

	nightly := schedule.Definition{Name: "nightly-report", Spec: "30 2 * * *", TimeZone: "Europe/Paris", Type: "reports.build"}
	// Every replica registers its schedules at start-up: the first stores
	// it, the others change nothing.
	for range 2 {
		res, err := s.Register(ctx, nightly)
		fmt.Println(res, err)
	}
	list, _ := s.List(ctx)
	for _, info := range list {
		fmt.Println(info.Name, info.Spec, info.TimeZone, "→", info.Target)
	}
	fmt.Println("remove:", s.Remove(ctx, "nightly-report"))
	_, err = s.Get(ctx, "nightly-report")
	fmt.Println("found after removal:", !errors.Is(err, framework.ErrNotFound))
	_, err = s.Register(ctx, schedule.Definition{Name: "bad", Spec: "0 61 * * * *", Type: "reports.build"})
	fmt.Println("invalid:", errors.Is(err, schedule.ErrInvalid))
	// Output:
	// created <nil>
	// unchanged <nil>
	// nightly-report 0 30 2 * * * Europe/Paris → jetflow.task.normal.reports.build
	// remove: <nil>
	// found after removal: false
	// invalid: true
}
