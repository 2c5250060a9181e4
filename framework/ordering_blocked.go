package framework

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/streams"
)

// Blocked keys: with [Ordering].BlockOnDeadLetter, a task of an ordered type
// that fails for good is not dead-lettered; it stays at the head of its
// partition, held in process with heartbeats, and a record in the ordering
// bucket says so, until an operator resolves it with
// [github.com/jetflow-io/jetflow/inspect.Operator.ResolveBlocked] (retry it, or skip it to the dead letters).

func ensureOrderingBucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	return ordering.EnsureBucket(ctx, js, names.OrderingBucket(), names.TaskStream())
}

// blockGate wraps the handler of an ordered type that blocks on dead
// letters.
func blockGate(kv jetstream.KeyValue, names streams.Names, taskType string, log *slog.Logger, next Handler) Handler {
	b := ordering.NewBlocker(kv, taskType, log)
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		key := t.Header(HeaderOrderingKey)
		if validateOrderingKey(key) != nil || streams.ValidateID(t.ID) != nil {
			return next.Handle(ctx, t) // not an ordered task: nothing to block
		}
		switch v, cause, err := b.Before(ctx, t.ID, t.Attempt); v {
		case ordering.Hold:
			return &ordering.HoldError{Cause: cause}
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
		if !onSlot(names, taskType, t) {
			return err // not an ordered task after all: dead-letter it
		}
		// Failed for good: block the key instead of dead-lettering.
		rec := ordering.Blocked{Type: taskType, TaskID: t.ID, Key: key, Error: truncate(err.Error(), 1024),
			Since: time.Now().UTC(), Attempts: t.Attempt}
		b.Block(ctx, rec)
		t.Logger().Error("jetflow ordered task failed for good; its key stays blocked until resolved",
			slog.String("ordering_key", key), slog.Any(LogKeyError, err))
		return &ordering.HoldError{Cause: rec.Error}
	})
}

// onSlot reports whether task t of taskType was stored on one of the
// type's slot subjects, that is, whether it is an ordered task. Anyone may
// set the ordering key header on a task of the type's ordinary subjects,
// where blocking would hold it on a consumer that the type's other tasks
// share. The subject comes from the delivery, which the server sets: a
// producer cannot forge it.
func onSlot(names streams.Names, taskType string, t *Task) bool {
	typ, _, err := names.ParseOrderedSubject(t.subject)
	return err == nil && typ == taskType
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
		tt.handler = blockGate(kv, w.names, tt.name, w.log, tt.handler)
	}
	return nil
}
