package ui

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// BenchmarkOverviewRead measures one uncached overview read (what a page
// refresh or a /metrics scrape costs the server) with 20 queues holding
// waiting tasks, without and with 10,000 delayed tasks, on an in-process
// server.
//
//	go test -run - -bench OverviewRead ./ui/
func BenchmarkOverviewRead(b *testing.B) {
	for _, scheduled := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("scheduled=%d", scheduled), func(b *testing.B) { benchOverview(b, scheduled) })
	}
}

func benchOverview(b *testing.B, scheduled int) {
	srv := testutil.RunServer(b)
	nc, js := testutil.JetStream(b, srv)
	ctx := context.Background()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		b.Fatal(err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		b.Fatal(err)
	}
	const queues = 20
	var jobs []framework.TaskSpec
	for q := range queues {
		typ := fmt.Sprintf("bench.q%d", q)
		if _, err := topology.EnsureConsumer(ctx, js, cl.Names(), topology.ConsumerSpec{TaskType: typ}); err != nil {
			b.Fatal(err)
		}
		for range 10 {
			jobs = append(jobs, framework.TaskSpec{Type: typ})
		}
	}
	for i := range scheduled {
		jobs = append(jobs, framework.TaskSpec{Type: fmt.Sprintf("bench.q%d", i%queues), Options: []framework.EnqueueOption{framework.In(time.Hour)}})
	}
	if _, err := cl.EnqueueMany(ctx, jobs); err != nil {
		b.Fatal(err)
	}
	hh, err := New(nc, Options{})
	if err != nil {
		b.Fatal(err)
	}
	h := hh.(*handler)
	req := httptest.NewRequest("GET", "/api/overview", nil)
	b.ResetTimer()
	for b.Loop() {
		ov, err := h.readSnapshot(req)
		if err != nil {
			b.Fatal(err)
		}
		if ov.Scheduled != scheduled || len(ov.Queues) != queues {
			b.Fatalf("overview: %d scheduled, %d queues", ov.Scheduled, len(ov.Queues))
		}
	}
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/read")
}
