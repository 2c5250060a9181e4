package deadletter

import (
	"context"
	"time"
)

// WriteStranded writes the record of a task that no consumer reads, moved
// to the dead-letter stream by an operator (routed by "operator", reason
// [ReasonStranded], a.Cause saying why). The caller deletes the task after.
func (c *Core) WriteStranded(ctx context.Context, a Attempt) error {
	now := time.Now()
	ack, err := c.publish(ctx, c.recordMsg(deadSource{
		seq: a.Seq, subject: a.Subject, header: a.Header, payload: a.Payload,
		taskID: a.ID, taskType: a.Type, priority: a.Priority,
		reason: ReasonStranded, routedBy: routedByOperator,
		lastErr: a.Cause.Error(), lastFailure: now, deadAt: now,
	}))
	if err != nil {
		return err
	}
	if a.Seq > 0 {
		c.markDead(a.Seq, a.ID, ack.Sequence)
	}
	return nil
}

// WriteRejected writes the record of a message of stream (not the task
// stream) that can never become a task, for example a delayed task the
// mover cannot turn into a schedule: reason [ReasonInvalid], routed by
// the worker, a.Cause saying why, a.Seq its sequence in stream. The
// record's deduplication ID names stream, so a retry after a lost
// acknowledgement writes no second record. The caller removes the message
// after.
func (c *Core) WriteRejected(ctx context.Context, stream string, a Attempt) error {
	return c.writeRefused(ctx, stream, a, ReasonInvalid)
}
