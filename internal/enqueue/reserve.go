package enqueue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

// Reserver takes the reservations of a client's unique tasks (see
// docs/unique.md) in the unique bucket, which it creates on first use.
// Its fields are set once, before the first reservation; Reserve is then
// safe for concurrent use.
type Reserver struct {
	// Conn is the client's connection; JS its JetStream context.
	Conn *nats.Conn
	JS   jetstream.JetStream
	// Names are the client's topology names.
	Names streams.Names
	// Rules validate what the bucket holds.
	Rules unique.Validators
	// Log gets the warning of a reservation that could not be given back.
	Log *slog.Logger

	cache unique.Cache
}

// Reserve takes the reservation of the unique task (taskType, id) of msg,
// a message [Builder.Build] built, before it is published. When another task
// holds the key it returns held true and the holder's ID; else a release
// function that gives the reservation back if the publish fails. Its
// errors wrap unique.ErrBucket, or are those of [PublishError].
func (r *Reserver) Reserve(ctx context.Context, msg *nats.Msg, taskType, id string) (holder string, held bool, release func(), err error) {
	kv, err := r.cache.Ensure(ctx, r.JS, r.Names.UniqueBucket(), r.Names.TaskStream(), streamdefs.UniqueMarkerTTL)
	if err != nil {
		return "", false, nil, err
	}
	res, held, holder, err := r.Rules.ReserveTask(ctx, kv, msg.Header, id, taskType, streamdefs.UniqueMarkerTTL)
	if held {
		return holder, true, nil, nil
	}
	if err != nil {
		return "", false, nil, fmt.Errorf("framework: enqueue %s: reserve unique key: %w", taskType, PublishError(r.Conn.IsClosed(), taskType, id, err))
	}
	release = func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := res.Release(rctx); err != nil {
			r.Log.Warn("jetflow could not release a unique reservation after a failed enqueue; it ends with its period",
				slog.String("task_type", taskType), slog.Any("error", err))
		}
	}
	return "", false, release, nil
}

// PublishError describes the failed publish (or server request) of task id
// of taskType ("" for a task known by its ID alone), wrapping the sentinel
// of err's kind (natserr.Wrap); closed says that the connection is closed,
// which some publish paths report without wrapping
// nats.ErrConnectionClosed (creating the async reply subscription).
func PublishError(closed bool, taskType, id string, err error) error {
	what := fmt.Sprintf("framework: enqueue %s %s", taskType, id)
	if taskType == "" {
		what = fmt.Sprintf("framework: task %s", id)
	}
	if closed || natserr.Classify(err) == natserr.NotConnected {
		return fmt.Errorf("%s: %w (%w); nothing was stored", what, natserr.ErrNotConnected, err)
	}
	return natserr.Wrap(what, err)
}
