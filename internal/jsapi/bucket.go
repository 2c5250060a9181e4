package jsapi

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nats-io/nats.go/jetstream"
)

// TaskStreamBucket returns kv with the task stream's storage and replica
// count, so that every jetflow bucket lives like the tasks do. If the task
// stream cannot be read, kv keeps its own (file storage, one replica).
func TaskStreamBucket(ctx context.Context, js jetstream.JetStream, taskStream string, kv jetstream.KeyValueConfig) jetstream.KeyValueConfig {
	if s, err := js.Stream(ctx, taskStream); err == nil {
		cfg := s.CachedInfo().Config
		kv.Storage, kv.Replicas = cfg.Storage, cfg.Replicas
	}
	return kv
}

// EnsureBucket creates a bucket, or, with setTTL, updates the TTL of an
// existing one when it differs. Other settings an operator changed are kept.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, want jetstream.KeyValueConfig, setTTL bool) error {
	kv, err := js.KeyValue(ctx, want.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		_, err = js.CreateKeyValue(ctx, want)
		if err == nil || errors.Is(err, jetstream.ErrBucketExists) {
			return nil
		}
		return fmt.Errorf("jetflow: create bucket %s: %w", want.Bucket, err)
	}
	if err != nil {
		return fmt.Errorf("jetflow: bucket %s: %w", want.Bucket, err)
	}
	if !setTTL {
		return nil
	}
	st, err := kv.Status(ctx)
	if err != nil {
		return fmt.Errorf("jetflow: bucket %s: %w", want.Bucket, err)
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || st.TTL() == want.TTL {
		return nil
	}
	si := bs.StreamInfo()
	cfg := si.Config
	cfg.MaxAge = want.TTL
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		return fmt.Errorf("jetflow: bucket %s: set TTL %v: %w", want.Bucket, want.TTL, err)
	}
	return nil
}

// BucketCache keeps a handle on one KV bucket, looked up on first use. The
// zero value is ready to use; it is safe for concurrent use.
type BucketCache struct {
	mu sync.Mutex
	kv jetstream.KeyValue
}

// Get returns bucket, looking it up on first use. When it does not exist,
// create is called and the lookup repeated; create's error is returned as
// it is.
func (c *BucketCache) Get(ctx context.Context, js jetstream.JetStream, bucket string, create func(context.Context) error) (jetstream.KeyValue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.kv != nil {
		return c.kv, nil
	}
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if err := create(ctx); err != nil {
			return nil, err
		}
		kv, err = js.KeyValue(ctx, bucket)
	}
	if err != nil {
		return nil, fmt.Errorf("jetflow: bucket %s: %w", bucket, err)
	}
	c.kv = kv
	return kv, nil
}
