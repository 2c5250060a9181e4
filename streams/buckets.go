package streams

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

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
// Timings.RegistryInterval).
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

// DebounceBucket returns the name of the bucket of debounced enqueues
// (package debounce), for example "JETFLOW_DEBOUNCE": one record per key
// of a type with enqueues waiting to run.
func (n Names) DebounceBucket() string { return n.upper + "_DEBOUNCE" }
