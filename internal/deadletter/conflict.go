package deadletter

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/internal/delays"
)

// WriteConflict writes the record of a delayed task of stream (the delay
// stream) whose task ID already has a pending schedule that another
// delayed task stored: reason [ReasonConflict], routed by the worker,
// a.Cause saying why, a.Seq its sequence in stream. The existing schedule
// is kept; this record is all that is left of the newcomer. Like
// [Core.WriteRejected], a retry after a lost acknowledgement writes no
// second record. The caller removes the message after.
func (c *Core) WriteConflict(ctx context.Context, stream string, a Attempt) error {
	return c.writeRefused(ctx, stream, a, ReasonConflict)
}

// writeRefused writes the record of message a of stream (not the task
// stream) that the worker refused for reason.
func (c *Core) writeRefused(ctx context.Context, stream string, a Attempt, reason string) error {
	now := time.Now()
	_, err := c.publish(ctx, c.recordMsg(deadSource{
		seq: a.Seq, stream: stream, subject: a.Subject, header: a.Header, payload: a.Payload,
		taskID: a.ID, taskType: a.Type, priority: a.Priority, deliveries: a.Attempt,
		reason: reason, routedBy: routedByWorker,
		lastErr: a.Cause.Error(), lastErrAttempt: a.Attempt, lastFailure: now, deadAt: now,
	}))
	return err
}

// RejectDelayed returns the mover's writer of the records of delayed tasks
// it rejects from stream, the delay stream ([delays.Rejected]): a conflict
// with [Core.WriteConflict], anything else with [Core.WriteRejected] and a
// cause wrapping corrupt.
func (c *Core) RejectDelayed(stream string, corrupt error) func(context.Context, delays.Rejected) error {
	return func(ctx context.Context, r delays.Rejected) error {
		a := Attempt{Seq: r.Seq, Subject: r.Subject, Header: r.Header, Payload: r.Data,
			ID: r.ID, Type: r.Type, Priority: r.Priority, Attempt: r.Deliveries}
		if r.Conflict {
			a.Cause = fmt.Errorf("delayed task: %w", r.Cause)
			return c.WriteConflict(ctx, stream, a)
		}
		a.Cause = fmt.Errorf("%w: delayed task: %w", corrupt, r.Cause)
		return c.WriteRejected(ctx, stream, a)
	}
}
