package fleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
)

// Heartbeat intervals and record lifetimes.
const (
	// DefaultInterval is how often a worker writes its record by default.
	DefaultInterval = 5 * time.Second
	// MinInterval and MaxInterval bound the interval a worker may choose.
	MinInterval = time.Second
	MaxInterval = time.Minute
	// TTLFactor is a record's lifetime in intervals: a worker that misses
	// TTLFactor-1 writes in a row (a slow server, a short network cut) is
	// still listed; a dead one is gone TTLFactor intervals after its last
	// write.
	TTLFactor = 3
	// BucketMaxAge bounds the life of any record in the bucket, also one
	// written without a TTL; it is above the longest record TTL
	// (TTLFactor × MaxInterval).
	BucketMaxAge = 5 * time.Minute
	// MarkerTTL is how long the bucket keeps the marker of a record that
	// expired or was deleted.
	MarkerTTL = time.Minute
)

// TTL returns the lifetime of a record written every interval: TTLFactor
// intervals, rounded up to whole seconds (a message TTL's unit).
func TTL(interval time.Duration) time.Duration {
	return (TTLFactor*interval + time.Second - 1).Truncate(time.Second)
}

// BucketConfig returns the configuration of the registry bucket: one
// record per worker ID, no history, records with TTLs of their own
// (LimitMarkerTTL enables them) under a MaxAge of [BucketMaxAge].
func BucketConfig(bucket string) jetstream.KeyValueConfig {
	return jetstream.KeyValueConfig{
		Bucket:         bucket,
		Description:    "jetflow workers: one record per running worker, expiring unless the worker writes it again",
		History:        1,
		TTL:            BucketMaxAge,
		LimitMarkerTTL: MarkerTTL,
	}
}

// EnsureBucket creates the registry bucket with the task stream's storage
// and replica count when it is missing.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, bucket, taskStream string) error {
	cfg := jsapi.TaskStreamBucket(ctx, js, taskStream, BucketConfig(bucket))
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	return nil
}

// Announcer writes one worker's record every interval while it runs.
type Announcer struct {
	// JS publishes the records.
	JS jetstream.JetStream
	// Bucket is the registry bucket.
	Bucket string
	// Interval is how often the record is written; its TTL is TTL(Interval).
	Interval time.Duration
	// Rules check the record before it is written.
	Rules Rules
	// Snapshot returns the record to write, without Heartbeat and
	// TTLSeconds, which the announcer sets. It is called once per
	// interval, never on a task's path.
	Snapshot func() Record
	// Log receives failed writes, at Warn for the first of a run of
	// failures and at Info when writing works again.
	Log *slog.Logger
}

// Run writes the record at once and every interval until ctx ends, then
// deletes it (bounded by 5 s) so that a stopped worker leaves the registry
// at once. A failed write is logged and tried again at the next interval.
func (a *Announcer) Run(ctx context.Context) {
	subject := "$KV." + a.Bucket + "."
	var (
		key     string
		failing bool
	)
	write := func() error {
		rec := a.Snapshot()
		key = rec.ID
		rec.Heartbeat = time.Now().UTC()
		ttl := TTL(a.Interval)
		rec.TTLSeconds = int(ttl / time.Second)
		b, err := a.Rules.Encode(&rec)
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, min(a.Interval, 5*time.Second))
		defer cancel()
		_, err = a.JS.Publish(wctx, subject+key, b, jetstream.WithMsgTTL(ttl))
		return err
	}
	report := func(err error) {
		switch {
		case err != nil && !failing && ctx.Err() == nil:
			failing = true
			a.Log.Warn("jetflow worker registry: record not written; retrying every interval",
				slog.String("bucket", a.Bucket), slog.Any("error", err))
		case err == nil && failing:
			failing = false
			a.Log.Info("jetflow worker registry: record written again", slog.String("bucket", a.Bucket))
		}
	}
	report(write())
	tick := time.NewTicker(a.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			a.remove(key)
			return
		case <-tick.C:
			report(write())
		}
	}
}

// remove deletes the record of key, leaving a marker that expires after
// MarkerTTL.
func (a *Announcer) remove(key string) {
	if key == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	kv, err := a.JS.KeyValue(ctx, a.Bucket)
	if err == nil {
		err = kv.Purge(ctx, key, jetstream.PurgeTTL(MarkerTTL))
	}
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		a.Log.Warn("jetflow worker registry: record not deleted at shutdown; it expires with its TTL",
			slog.String("bucket", a.Bucket), slog.Any("error", err))
	}
}
