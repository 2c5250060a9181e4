package delays

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
)

// A pending delayed task (one that has not fired) is in one of two places:
// in the delay stream until a mover takes it, then in its schedule in the
// schedule stream.

// Read calls fn with the pending delayed task id, still in the delay stream
// or, once moved, in the schedule stream, and reports whether there was
// one. The delay stream is read first: a mover stores the schedule before
// it removes the delayed task, so a task moving between the two reads is
// found in the second, never missed. No delay stream (a deployment from
// before it) counts as an empty one.
func (t Topology) Read(ctx context.Context, nc *nats.Conn, id string, fn func(jsapi.Stored) error) (bool, error) {
	n, err := jsapi.DirectGet(ctx, nc, t.DelayStream, jsapi.GetRequest{NextFor: t.DelaySubject(id)}, fn)
	if err != nil && !errors.Is(err, jsapi.ErrNoStream) {
		return false, err
	}
	if n > 0 {
		return true, nil
	}
	n, err = jsapi.DirectGet(ctx, nc, t.ScheduleStream, jsapi.GetRequest{NextFor: t.ScheduleSubject(id)}, fn)
	return n > 0, err
}

// Cancel removes the pending delayed task id: its delay subject first, then
// its schedule, so that a mover that stores the schedule after the second
// purge finds its delayed task gone and removes the schedule itself. It
// returns how many messages the purges removed: 0 when the task was not
// pending (it fired meanwhile, or never was delayed). No delay stream (a
// deployment from before it) counts as an empty one.
func (t Topology) Cancel(ctx context.Context, nc *nats.Conn, id string) (uint64, error) {
	moving, err := jsapi.PurgeSubject(ctx, nc, t.DelayStream, t.DelaySubject(id))
	if natserr.Classify(err) == natserr.TopologyMissing {
		err = nil
	}
	if err != nil {
		return 0, err
	}
	pending, err := jsapi.PurgeSubject(ctx, nc, t.ScheduleStream, t.ScheduleSubject(id))
	return moving + pending, err
}
