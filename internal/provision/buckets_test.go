package provision_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/provision"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// EnsureBuckets creates every bucket a least-privilege program needs, with
// the retention asked for (also in a deployment whose streams.Ensure
// predates some of them), and fails on a missing topology.
func TestEnsureBuckets(t *testing.T) {
	_, js := testutil.JetStream(t, testutil.RunServer(t))
	n := streams.MustNames(streams.DefaultPrefix)
	if err := provision.EnsureBuckets(t.Context(), js, n, time.Hour, 2*time.Hour); !errors.Is(err, natserr.ErrTopologyMissing) {
		t.Fatalf("without the task stream: %v, want ErrTopologyMissing", err)
	}
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{n.UniqueBucket(), n.LimitsBucket(), n.StateBucket()} {
		if err := js.DeleteKeyValue(t.Context(), b); err != nil {
			t.Fatal(err)
		}
	}
	if err := provision.EnsureBuckets(t.Context(), js, n, time.Hour, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	for bucket, ttl := range map[string]time.Duration{n.StateBucket(): time.Hour, n.EffectsBucket(): 2 * time.Hour,
		n.UniqueBucket(): 0, n.LimitsBucket(): 0} {
		kv, err := js.KeyValue(t.Context(), bucket)
		if err != nil {
			t.Fatalf("bucket %s: %v", bucket, err)
		}
		st, err := kv.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if ttl > 0 && st.TTL() != ttl {
			t.Errorf("bucket %s: TTL %v, want %v", bucket, st.TTL(), ttl)
		}
	}
}
