package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/streams"
)

// Blocked keys: with [Ordering].BlockOnDeadLetter, a task of an ordered type
// that fails for good is not dead-lettered; it stays at the head of its
// partition, held in process with heartbeats, and a record in the ordering
// bucket says so, until an operator resolves it with
// [Inspector.ResolveBlocked] (retry it, or skip it to the dead letters).

// ErrBlockedSkipped is the error of a blocked task an operator skipped with
// [Inspector.ResolveBlocked]: the task is dead-lettered with it and its key
// moves on.
var ErrBlockedSkipped = errors.New("framework: blocked ordered task skipped by an operator")

// blockedRecheck is how often a held blocked task reads its record again.
const blockedRecheck = 2 * time.Second

// BlockedTask is a task that failed for good and keeps its ordering key
// (and its partition) blocked, as [Inspector.BlockedTasks] lists it.
type BlockedTask struct {
	// Type and TaskID identify the task; Key is its ordering key.
	Type   string `json:"type"`
	TaskID string `json:"id"`
	Key    string `json:"key"`
	// Error is the last error (at most 1,024 bytes).
	Error string `json:"error"`
	// Since is when it blocked; Attempts how many deliveries it had then.
	Since    time.Time `json:"since"`
	Attempts int       `json:"attempts"`
	// Resolution is "" while blocked, then "retry" or "skip" until the
	// worker holding the task acts on it.
	Resolution string `json:"resolution,omitempty"`
}

// Resolutions of [Inspector.ResolveBlocked].
const (
	ResolveRetry = ordering.ResolveRetry // run the task again (one more attempt)
	ResolveSkip  = ordering.ResolveSkip  // dead-letter it; its key moves on
)

func ensureOrderingBucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	return ordering.EnsureBucket(ctx, js, names.OrderingBucket(), names.TaskStream())
}

// blockedHoldError sets a blocked task aside until its record is read again.
type blockedHoldError struct{ cause string }

func (e *blockedHoldError) Error() string {
	return "framework: ordered task blocked after failing for good (resolve with Inspector.ResolveBlocked): " + e.cause
}

// blockGate wraps the handler of an ordered type that blocks on dead
// letters.
func blockGate(kv jetstream.KeyValue, taskType string, log *slog.Logger, next Handler) Handler {
	b := ordering.NewBlocker(kv, taskType, log)
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		key := t.Header(HeaderOrderingKey)
		if validateOrderingKey(key) != nil || streams.ValidateID(t.ID) != nil {
			return next.Handle(ctx, t) // not an ordered task: nothing to block
		}
		switch v, cause, err := b.Before(ctx, t.ID, t.Attempt); v {
		case ordering.Hold:
			return &blockedHoldError{cause: cause}
		case ordering.Skip:
			return Permanent(ErrBlockedSkipped)
		case ordering.Fail:
			return err
		}
		err := next.Handle(ctx, t)
		if err == nil || (!IsPermanent(err) && t.Attempt < t.MaxAttempts) {
			return err
		}
		if ctx.Err() != nil && !errors.Is(context.Cause(ctx), ErrHandlerTimeout) {
			return err // the worker is stopping: hand it back
		}
		// Failed for good: block the key instead of dead-lettering.
		rec := ordering.Blocked{Type: taskType, TaskID: t.ID, Key: key, Error: truncate(err.Error(), 1024),
			Since: time.Now().UTC(), Attempts: t.Attempt}
		b.Block(ctx, rec)
		t.Logger().Error("jetflow ordered task failed for good; its key stays blocked until resolved",
			slog.String("ordering_key", key), slog.Any(LogKeyError, err))
		return &blockedHoldError{cause: rec.Error}
	})
}

// prepareBlocking installs the gates of the ordered types that block.
func prepareBlocking(ctx context.Context, w *Worker) error {
	var kv jetstream.KeyValue
	for _, tt := range w.order {
		if o := tt.cfg.ordering; o == nil || !o.BlockOnDeadLetter {
			continue
		}
		if kv == nil {
			var err error
			if kv, err = ensureOrderingBucket(ctx, w.js, w.names); err != nil {
				return err
			}
		}
		tt.handler = blockGate(kv, tt.name, w.log, tt.handler)
	}
	return nil
}

func holdBlocked(_ *Task, err error) (time.Duration, bool) {
	var h *blockedHoldError
	if errors.As(err, &h) {
		return blockedRecheck/2 + rand.N(blockedRecheck), true
	}
	return 0, false
}

// BlockedTasks lists the ordered tasks that failed for good and keep their
// key blocked ([Ordering].BlockOnDeadLetter). Records that fail validation
// are skipped.
func (i *Inspector) BlockedTasks(ctx context.Context) ([]BlockedTask, error) {
	recs, err := orderingRules(i.names).ListBlocked(ctx, i.js, i.names.OrderingBucket())
	if err != nil {
		return nil, fmt.Errorf("framework: blocked tasks: %w", err)
	}
	var out []BlockedTask
	for _, r := range recs {
		out = append(out, BlockedTask(r))
	}
	return out, nil
}

// ResolveBlocked unblocks the key of a blocked ordered task: [ResolveRetry]
// runs it again (one more attempt; if it fails it blocks again),
// [ResolveSkip] dead-letters it with [ErrBlockedSkipped] and lets its key
// move on. The worker holding the task acts within a few seconds. It
// returns [ErrNotFound] when the task is not blocked.
func (i *Inspector) ResolveBlocked(ctx context.Context, taskType, id, resolution string) error {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return err
	}
	if err := streams.ValidateID(id); err != nil {
		return err
	}
	if resolution != ResolveRetry && resolution != ResolveSkip {
		return fmt.Errorf("%w: resolution %q, want %q or %q", ErrInvalidOption, resolution, ResolveRetry, ResolveSkip)
	}
	err := ordering.Resolve(ctx, i.js, i.names.OrderingBucket(), taskType, id, resolution)
	if errors.Is(err, ordering.ErrNotBlocked) {
		return fmt.Errorf("%w: task %s of type %s is not blocked", ErrNotFound, id, taskType)
	}
	return err
}
