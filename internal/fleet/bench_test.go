package fleet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/testutil"
)

// BenchmarkRecordWrite measures one registry write of a worker serving ten
// types at every priority: encoding the record and publishing it with its
// TTL to an embedded server, as the announcer does once per interval.
func BenchmarkRecordWrite(b *testing.B) {
	s := testutil.RunServer(b)
	_, js := testutil.JetStream(b, s)
	ctx := context.Background()
	if err := fleet.EnsureBucket(ctx, js, "JETFLOW_WORKERS", "JETFLOW_TASKS"); err != nil {
		b.Fatal(err)
	}
	rec := record("bench")
	rec.Types = nil
	for i := range 10 {
		rec.Types = append(rec.Types, fleet.Serves{Type: fmt.Sprintf("billing.type%d", i), Concurrency: 4,
			Priorities: []string{"critical", "high", "normal", "low"}})
	}
	rec.Heartbeat = time.Now()
	data, err := rules.Encode(&rec)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		data, err := rules.Encode(&rec)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := js.Publish(ctx, "$KV.JETFLOW_WORKERS.bench", data, jetstream.WithMsgTTL(15*time.Second)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(data)), "record_bytes")
}
