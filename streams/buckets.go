package streams

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
)

// bucketConfigs returns the KV buckets of c (streamdefs.BucketConfigs)
// with c's storage and replica count.
func bucketConfigs(c Config) ([]jetstream.KeyValueConfig, error) {
	c, n, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	return streamdefs.BucketConfigs(n, c.Storage, c.Replicas), nil
}

// WorkersBucket returns the name of the worker registry bucket, for
// example "JETFLOW_WORKERS": one record per running worker, keyed by its ID,
// each expiring unless its worker writes it again (see framework's
// WithRegistryInterval).
func (n Names) WorkersBucket() string { return n.upper + "_WORKERS" }

// ensureBuckets creates the missing buckets of c. Existing buckets keep
// their settings (workers set the retention they are configured with); a
// storage different from c's is reported as drift.
func ensureBuckets(ctx context.Context, js jetstream.JetStream, c Config, rep *Report, apply bool) error {
	cfgs, err := bucketConfigs(c)
	if err != nil {
		return err
	}
	for _, want := range cfgs {
		err := streamdefs.RetryTransient(ctx, func() error { return ensureBucket(ctx, js, want, rep, apply) })
		if err != nil {
			return err
		}
	}
	return nil
}

func ensureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, rep *Report, apply bool) error {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) && !apply {
		rep.BucketsCreated = append(rep.BucketsCreated, want.Bucket)
		return nil
	}
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateKeyValue(ctx, want)
		if err == nil {
			rep.BucketsCreated = append(rep.BucketsCreated, want.Bucket)
			return nil
		}
		if !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("streams: create bucket %s: %w", want.Bucket, err)
		}
		kv, err = js.KeyValue(ctx, want.Bucket) // another process created it
	}
	if err != nil {
		return fmt.Errorf("streams: look up bucket %s: %w", want.Bucket, err)
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("streams: bucket %s: %w", want.Bucket, err)
	}
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		if have := bs.StreamInfo().Config.Storage; have != want.Storage {
			rep.Drift = append(rep.Drift, Drift{Resource: want.Bucket, Field: "Storage", Want: fmt.Sprint(want.Storage), Have: fmt.Sprint(have),
				Fix: bucketFix(want.Bucket)})
		}
	}
	rep.BucketsUnchanged = append(rep.BucketsUnchanged, want.Bucket)
	return nil
}

// EnsureRetention creates the task state and effects buckets of n when
// missing, with the task stream's storage and replica count, and sets their
// retention: stateTTL and effectsTTL become the buckets' MaxAge. A TTL of 0
// leaves an existing bucket as it is and gives a new one its default
// (7 days for task state, 30 days for effects). Workers call it at start with
// their retention options (framework.EnsureBuckets). The task stream must
// exist: without it the error wraps natserr's ErrTopologyMissing
// (framework.ErrTopologyMissing).
func EnsureRetention(ctx context.Context, js jetstream.JetStream, n Names, stateTTL, effectsTTL time.Duration) error {
	s, err := js.Stream(ctx, n.TaskStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("framework: ensure buckets: %w: %w", natserr.ErrTopologyMissing, err)
		}
		return fmt.Errorf("framework: ensure buckets: %w", err)
	}
	cfg := s.CachedInfo().Config
	cfgs, err := bucketConfigs(Config{Prefix: n.Prefix(), Storage: cfg.Storage, Replicas: cfg.Replicas})
	if err != nil {
		return err
	}
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

// DebounceBucket returns the name of the bucket of debounced enqueues
// (package debounce), for example "JETFLOW_DEBOUNCE": one record per key
// of a type with enqueues waiting to run.
func (n Names) DebounceBucket() string { return n.upper + "_DEBOUNCE" }
