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
