package main

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// BenchmarkEnqueue measures what the service import costs a producer:
// Enqueue (one round trip per task) and EnqueueMany (asynchronous
// publishes) from a tenant's account, across the import, and from a user
// of the jetflow account, as in the single-account layout.
func BenchmarkEnqueue(b *testing.B) {
	for _, layout := range []struct {
		name   string
		single bool
	}{{"accounts", false}, {"single-account", true}} {
		b.Run(layout.name, func(b *testing.B) {
			s := testutil.RunSecured(b, testutil.SecuredConfig{SingleAccount: layout.single})
			cl, err := framework.NewClient(s.Connect(b, testutil.SecuredProducer), framework.WithStateTracking(false), framework.WithPartitions(1))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(b.Context(), 5*time.Minute)
			defer cancel()
			b.Run("Enqueue", func(b *testing.B) {
				for b.Loop() {
					if _, err := cl.Enqueue(ctx, "bench.work", nil); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run("EnqueueMany", func(b *testing.B) {
				specs := make([]framework.TaskSpec, 100)
				for i := range specs {
					specs[i] = framework.TaskSpec{Type: "bench.work"}
				}
				for b.Loop() {
					if _, err := cl.EnqueueMany(ctx, specs); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*len(specs))/b.Elapsed().Seconds(), "tasks/s")
			})
		})
	}
}
