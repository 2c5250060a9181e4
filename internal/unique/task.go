package unique

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
)

// ErrHeader reports unique headers of a delivered task that fail
// validation ([Cache.ReleaseDone]): nothing is released.
var ErrHeader = errors.New("framework: invalid unique reservation header")

// Reserved is a reservation a client took before publishing its task.
type Reserved struct {
	kv        jetstream.KeyValue
	key       string
	rev       uint64
	markerTTL time.Duration
}

// Release gives the reservation back, for example after a failed publish,
// leaving a marker for the bucket's marker TTL.
func (r *Reserved) Release(ctx context.Context) error {
	return Release(ctx, r.kv, r.key, r.rev, r.markerTTL)
}

// ReserveTask takes, in kv, the reservation the unique headers h of task
// (id, taskType) ask for, before it is published: its key ([HeaderKey])
// until [HeaderUntil]. A task that releases the reservation when it
// succeeds ([HeaderRevision] present) gets the reservation's revision in
// that header. When another task holds the key it returns held true and
// the holder's ID ("" when unreadable).
func (v Validators) ReserveTask(ctx context.Context, kv jetstream.KeyValue, h nats.Header, id, taskType string, markerTTL time.Duration) (r *Reserved, held bool, holder string, err error) {
	key := h.Get(HeaderKey)
	until, err := time.Parse(time.RFC3339, h.Get(HeaderUntil))
	if err != nil {
		return nil, false, "", fmt.Errorf("framework: unique until: %w", err)
	}
	untilDone := h.Get(HeaderRevision) != ""
	rev, held, holder, err := v.Reserve(ctx, kv, key, Reservation{TaskID: id, Type: taskType, Until: until, UntilDone: untilDone})
	if held || err != nil {
		return nil, held, holder, err
	}
	if untilDone {
		h.Set(HeaderRevision, strconv.FormatUint(rev, 10))
	}
	return &Reserved{kv: kv, key: key, rev: rev, markerTTL: markerTTL}, false, "", nil
}

// ReleaseDone ends the reservation of a succeeded task of taskType that
// asked for it ([HeaderRevision]), in bucket, which c binds without
// creating it (a worker needs no permissions on it otherwise). Only that
// reservation is released: one that expired, and that another task took
// since, has another revision and stays. Headers that fail validation
// return an error wrapping [ErrHeader]; a task without a revision releases
// nothing. cut bounds the header text quoted in errors.
func (c *Cache) ReleaseDone(ctx context.Context, js jetstream.JetStream, bucket string, v Validators, taskType string, h nats.Header, markerTTL time.Duration, cut func(string, int) string) error {
	key := h.Get(HeaderKey)
	rev, ok, err := v.ReleaseTarget(taskType, key, h.Get(HeaderRevision), cut)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrHeader, err)
	}
	if !ok {
		return nil
	}
	kv, err := c.Bind(ctx, js, bucket)
	if err == nil {
		err = Release(ctx, kv, key, rev, markerTTL)
	}
	if err != nil && !errors.Is(err, jetstream.ErrKeyExists) && !natserr.WrongLastSequence(err) {
		return err
	}
	return nil
}
