package streams_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// Ensure creates every KV bucket once, keeps an existing bucket's settings
// (a worker's retention) and reports a bucket stored differently as drift.
func TestEnsureCreatesBuckets(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	n := streams.MustNames("")
	all := []string{n.BreakerBucket(), n.EffectsBucket(), n.ErrorsBucket(), n.LimitsBucket(), n.OrderingBucket(), n.StateBucket(), n.UniqueBucket(), n.WorkersBucket()}
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(rep.BucketsCreated)); !slices.Equal(got, all) || len(rep.BucketsUnchanged) != 0 {
		t.Fatalf("created %v unchanged %v, want %v created", rep.BucketsCreated, rep.BucketsUnchanged, all)
	}
	kv, err := js.KeyValue(ctx, n.StateBucket())
	if err != nil {
		t.Fatal(err)
	}
	st, err := kv.Status(ctx)
	if err != nil || st.TTL() != streamdefs.DefaultStateTTL {
		t.Fatalf("state bucket TTL %v (%v), want %v", st.TTL(), err, streamdefs.DefaultStateTTL)
	}
	// A worker's setting survives a later Ensure.
	if _, err := js.UpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: n.StateBucket(), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	rep, err = streams.Ensure(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := slices.Sorted(slices.Values(rep.BucketsUnchanged)); !slices.Equal(got, all) || len(rep.BucketsCreated) != 0 {
		t.Fatalf("second Ensure: created %v unchanged %v", rep.BucketsCreated, rep.BucketsUnchanged)
	}
	if st, err := kv.Status(ctx); err != nil || st.TTL() != time.Hour {
		t.Fatalf("state bucket TTL after Ensure %v (%v), want the worker's 1h", st.TTL(), err)
	}
}

func TestEnsureReportsBucketStorageDrift(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	n := streams.MustNames("")
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: n.EffectsBucket(), Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	var de *streams.DriftError
	if !errors.As(err, &de) || len(rep.Drift) != 1 || rep.Drift[0].Resource != n.EffectsBucket() || rep.Drift[0].Field != "Storage" {
		t.Fatalf("Ensure = %v, drift %+v; want the effects bucket's storage", err, rep.Drift)
	}
}
