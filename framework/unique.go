package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

// Unique tasks: a reservation per uniqueness key in a KV bucket whose keys
// carry their own TTL (the period). See docs/unique.md.

// Unique makes the task unique for period: a second enqueue of the same task
// type with the same uniqueness key before the period ends stores nothing and
// returns a [TaskInfo] with Duplicate set and the ID of the task holding the
// reservation. The key is the SHA-256 of the encoded payload (unique by
// arguments) unless [UniqueKey] names one. The reservation lives in a
// JetStream KV bucket ([streams.Names.UniqueBucket]) with a per-key TTL, so
// it holds across client, worker and server restarts. By default it lasts
// the whole period even after the task ran; with [UniqueUntilDone] it ends
// when the task succeeds. period is rounded up to whole seconds and must be
// at least [MinUniquePeriod].
//
// Unique costs one KV create per enqueue (see docs/benchmarks.md) and is
// not available with [Client.EnqueueMany].
func Unique(period time.Duration) EnqueueOption {
	return func(c *enqueueConfig) error {
		if period < MinUniquePeriod {
			return fmt.Errorf("%w: unique period %v, want ≥ %v", ErrInvalidOption, period, MinUniquePeriod)
		}
		// Round up, unless that would wrap the longest periods around
		// into the past.
		if period <= math.MaxInt64-time.Second {
			period += time.Second - 1
		}
		c.Unique.Period = period.Truncate(time.Second)
		return nil
	}
}

// UniqueKey sets the uniqueness key of a [Unique] task instead of deriving
// it from the payload, for example "settle:2026-11-30". The key is hashed
// with the task type, so any 1 to [MaxUniqueKeyLen] bytes are accepted and
// the same key of two task types does not collide.
func UniqueKey(key string) EnqueueOption {
	return func(c *enqueueConfig) error {
		if key == "" || len(key) > MaxUniqueKeyLen {
			return fmt.Errorf("%w: unique key of %d bytes, want 1 to %d", ErrInvalidOption, len(key), MaxUniqueKeyLen)
		}
		c.Unique.Key = key
		c.Unique.HasKey = true
		return nil
	}
}

// UniqueUntilDone ends the reservation of a [Unique] task as soon as the task
// succeeds, instead of at the end of its period. A task that fails for good
// (dead letter) keeps its reservation until the period ends.
func UniqueUntilDone() EnqueueOption {
	return func(c *enqueueConfig) error { c.Unique.UntilDone = true; return nil }
}

// uniqueRules validates unique keys and reservations read back from the
// wire or the bucket with the names' rules.
var uniqueRules = unique.Validators{
	TaskType:   streams.ValidateTaskType,
	ID:         streams.ValidateID,
	MaxTypeLen: streamdefs.MaxTaskTypeLen,
}

// uniqueBucketMarkerTTL is how long the unique bucket keeps the markers of
// keys that expired or were released.
const uniqueBucketMarkerTTL = streamdefs.UniqueMarkerTTL

// uniqueStore caches a handle on the unique bucket, created on first use.
type uniqueStore = unique.Cache

// enqueueUnique is Enqueue for a task with unique headers.
func (c *Client) enqueueUnique(ctx context.Context, msg *nats.Msg, info TaskInfo) (TaskInfo, bool, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultEnqueueTimeout)
		defer cancel()
	}
	holder, held, release, err := c.uniques.Reserve(ctx, msg, info.Type, info.ID)
	if err != nil {
		return TaskInfo{}, false, err
	}
	if held {
		dup := TaskInfo{ID: holder, Type: info.Type, Priority: info.Priority, Duplicate: true}
		c.emitEnqueued(ctx, dup)
		return dup, true, nil
	}
	ack, err := c.publish(ctx, msg)
	if err != nil {
		release()
		return TaskInfo{}, false, c.publishErr(info, err)
	}
	info.Stream, info.Sequence, info.Duplicate = ack.Stream, ack.Sequence, ack.Duplicate
	return info, false, nil
}

// uniqueExt releases the reservations of [UniqueUntilDone] tasks when they
// succeed.
type uniqueExt struct {
	w     *Worker
	store uniqueStore
}

func (w *Worker) installUnique() {
	x := &uniqueExt{w: w}
	// No prepare: a worker only binds the bucket (which the client created)
	// when a UniqueUntilDone task succeeds, so that workers need no
	// permissions on it otherwise.
	w.addExtension(extension{Plugin: Plugin{
		Name: "unique",
		Finished: func(_ context.Context, t *Task, o Outcome) {
			if o.Action == ActionAck && t.Header(HeaderUniqueRevision) != "" {
				x.succeeded(t)
			}
		},
	}})
}

func (x *uniqueExt) succeeded(t *Task) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := x.store.ReleaseDone(ctx, x.w.js, x.w.names.UniqueBucket(), uniqueRules, t.Type, t.Headers, uniqueBucketMarkerTTL, truncate)
	switch {
	case errors.Is(err, unique.ErrHeader):
		t.Logger().Warn("jetflow task has an invalid unique reservation header; not released", slog.Any(LogKeyError, err))
	case err != nil:
		t.Logger().Warn("jetflow could not release the unique reservation; it ends with its period", slog.Any(LogKeyError, err))
	}
}
