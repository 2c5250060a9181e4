package framework

import (
	"context"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/stage"
)

// enqueueStaged stores msg, built by Enqueue, where route r says instead of
// on its work subject (enqueue.Builder.Stage says which tasks can be
// staged).
func (c *Client) enqueueStaged(ctx context.Context, r stage.Route, msg *nats.Msg, info TaskInfo) (TaskInfo, error) {
	stream, err := c.builder.Stage(r, c.router.Layout(ctx), msg, info.Type, info.Priority, info.ID)
	if err != nil {
		return TaskInfo{}, err
	}
	traced := c.traceEnqueue(ctx, msg, info)
	ack, err := jsapi.PublishWithin(ctx, c.js, stream, msg, c.opts.logger, DefaultEnqueueTimeout)
	if err != nil {
		err = c.publishErr(info, err)
		traced(info, err)
		return TaskInfo{}, err
	}
	info.Subject, info.Stream, info.Sequence, info.Duplicate = msg.Subject, ack.Stream, ack.Sequence, ack.Duplicate
	c.enqueued(ctx, info)
	traced(info, nil)
	return info, nil
}
