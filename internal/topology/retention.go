package topology

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// EnsureRetention creates the task state and effects buckets of n when
// missing, with the task stream's storage and replica count, and sets their
// retention: stateTTL and effectsTTL become the buckets' MaxAge. A TTL of 0
// leaves an existing bucket as it is and gives a new one its default
// (7 days for task state, 30 days for effects). Workers call it at start with
// their retention options (framework.EnsureBuckets). The task stream must
// exist: without it the error wraps natserr's ErrTopologyMissing
// (framework.ErrTopologyMissing).
func EnsureRetention(ctx context.Context, js jetstream.JetStream, n streams.Names, stateTTL, effectsTTL time.Duration) error {
	s, err := js.Stream(ctx, n.TaskStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("framework: ensure buckets: %w: %w", natserr.ErrTopologyMissing, err)
		}
		return fmt.Errorf("framework: ensure buckets: %w", err)
	}
	cfg := s.CachedInfo().Config
	cfgs := streamdefs.BucketConfigs(n, cfg.Storage, cfg.Replicas)
	ttls := map[string]time.Duration{n.StateBucket(): stateTTL, n.EffectsBucket(): effectsTTL}
	for _, kv := range cfgs {
		ttl, ok := ttls[kv.Bucket]
		if !ok {
			continue
		}
		if ttl != 0 {
			kv.TTL = ttl
		}
		if err := jsapi.EnsureBucket(ctx, js, kv, ttl != 0); err != nil {
			return err
		}
	}
	return nil
}
