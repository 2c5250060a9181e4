package framework

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/stage"
)

// enqueueStaged stores msg, built by Enqueue, where route r says instead of
// on its work subject (package fairness, through internal/stage). Only an
// immediate task with an ID, no uniqueness and no ordering key, on the
// first task partition, can be staged: what moves it later republishes it
// to the work subject of its type and priority, with its ID as the
// deduplication ID.
func (c *Client) enqueueStaged(ctx context.Context, r stage.Route, msg *nats.Msg, info TaskInfo) (TaskInfo, error) {
	switch {
	case c.router.Layout(ctx).Partitions > 1:
		return TaskInfo{}, fmt.Errorf("%w: tasks cannot be staged in a deployment with task partitions", ErrInvalidOption)
	case msg.Subject != c.names.TaskSubject(info.Priority, info.Type):
		return TaskInfo{}, fmt.Errorf("%w: a staged task is immediate, unordered and on the first task partition (%s)", ErrInvalidOption, msg.Subject)
	case info.ID == "" || msg.Header.Get(jetstream.MsgIDHeader) == "":
		return TaskInfo{}, fmt.Errorf("%w: a staged task needs an ID: combine it with WithID when the client has WithDedup(false)", ErrInvalidOption)
	case msg.Header.Get(HeaderUniqueKey) != "":
		return TaskInfo{}, fmt.Errorf("%w: a staged task cannot be unique", ErrInvalidOption)
	}
	stream, subject, err := r(info.Type, info.Priority.String(), msg.Header.Get(HeaderKey))
	if err != nil {
		return TaskInfo{}, err
	}
	msg.Subject = subject
	traced := c.traceEnqueue(ctx, msg, info)
	ack, err := jsapi.PublishWithin(ctx, c.js, stream, msg, c.opts.logger, DefaultEnqueueTimeout)
	if err != nil {
		err = c.publishErr(info, err)
		traced(info, err)
		return TaskInfo{}, err
	}
	info.Subject, info.Stream, info.Sequence, info.Duplicate = subject, ack.Stream, ack.Sequence, ack.Duplicate
	c.enqueued(ctx, info)
	traced(info, nil)
	return info, nil
}
