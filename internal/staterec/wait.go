package staterec

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrWatchEnded is what [Wait] returns when the watch's updates stop: its
// connection was closed.
var ErrWatchEnded = errors.New("the watch ended")

// StartError is what [Wait] returns when the watch could not start; Err is
// the watch's error, for the caller to explain (a user not allowed to
// watch the bucket gets no answer at all).
type StartError struct{ Err error }

// Error returns the watch's error text.
func (e *StartError) Error() string { return e.Err.Error() }

// Unwrap returns the watch's error.
func (e *StartError) Unwrap() error { return e.Err }

// BadRecordError is what [Wait] returns for a value that is not a record
// of the task: anyone allowed to write the bucket may have put it there.
type BadRecordError struct{ Revision uint64 }

// Error names the value's revision.
func (e *BadRecordError) Error() string {
	return fmt.Sprintf("bad record at revision %d: not a record of this task", e.Revision)
}

// Wait watches key in kv and hands each record it holds, the current one
// first, to seen, until seen reports a final record (it returns nil then).
// seen decodes the record and says whether it is final, or not ok for a
// value that is not a record of the task ([BadRecordError]).
//
// Each value on reconnected (the connection's reconnections) starts a new
// watch at once, which begins with the key's current value: the old one's
// consumer may be gone, and nats.go would notice only after its missed
// heartbeats (about 10 s). If the new one cannot start, the old one
// recovers by itself. A record seen twice is handed to seen twice.
//
// It returns ctx's error when ctx ends first, [ErrWatchEnded] when the
// watch stops, and a [*StartError] when it could not start.
func Wait(ctx context.Context, kv jetstream.KeyValue, key string, reconnected <-chan nats.Status,
	seen func(data []byte, revision uint64) (final, ok bool)) error {
	watch, err := kv.Watch(ctx, key, jetstream.IgnoreDeletes())
	if err != nil {
		return &StartError{Err: err}
	}
	defer func() { _ = watch.Stop() }()
	for {
		select {
		case <-reconnected:
			if w, err := kv.Watch(ctx, key, jetstream.IgnoreDeletes()); err == nil {
				_ = watch.Stop()
				watch = w
			}
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-watch.Updates():
			if !ok {
				return ErrWatchEnded
			}
			if e == nil {
				continue // the initial value, if any, was delivered
			}
			final, ok := seen(e.Value(), e.Revision())
			if !ok {
				return &BadRecordError{Revision: e.Revision()}
			}
			if final {
				return nil
			}
		}
	}
}
