package framework

import (
	"context"
	"fmt"

	"github.com/jetflow-io/jetflow/internal/hookset"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/nats-io/nats.go"
)

// EnqueueHeader gives a [Hooks].Enqueuing hook the headers of one task message.
type EnqueueHeader struct {
	msg *nats.Msg
}

// maxTracerHeader bounds the size of one header value set by a tracer.
const maxTracerHeader = 4096

// Set sets header key to value. Like [WithHeader] it refuses reserved keys
// ("Nats-*", "Jetflow-*"), and it refuses keys that are not HTTP header
// tokens and values with line breaks or over 4 KiB, with an error wrapping
// [ErrInvalidOption].
func (h EnqueueHeader) Set(key, value string) error {
	if err := taskmsg.CheckHeader(key, value, maxTracerHeader); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	if h.msg.Header == nil {
		h.msg.Header = nats.Header{}
	}
	h.msg.Header.Set(key, value)
	return nil
}

// Get returns the first value of header key, or "".
func (h EnqueueHeader) Get(key string) string { return h.msg.Header.Get(key) }

// Keys returns the keys of the message's headers.
func (h EnqueueHeader) Keys() []string {
	keys := make([]string, 0, len(h.msg.Header))
	for k := range h.msg.Header {
		keys = append(keys, k)
	}
	return keys
}

// traceEnqueue calls the client's Enqueuing hooks for msg and returns the
// function that reports the result to each of them, in reverse order.
func (c *Client) traceEnqueue(ctx context.Context, msg *nats.Msg, info TaskInfo) func(TaskInfo, error) {
	if c.enqueuing == 0 {
		return func(TaskInfo, error) {}
	}
	dones := make([]func(TaskInfo, error), 0, c.enqueuing)
	for _, h := range c.opts.hooks {
		if h.Enqueuing == nil {
			continue
		}
		var done func(TaskInfo, error)
		hookset.Call(c.opts.logger, nil, "Enqueuing", func() { done = h.Enqueuing(ctx, info, EnqueueHeader{msg: msg}) })
		if done != nil {
			dones = append(dones, done)
		}
	}
	return func(info TaskInfo, err error) {
		for i := len(dones) - 1; i >= 0; i-- {
			hookset.Call(c.opts.logger, nil, "Enqueuing done", func() { dones[i](info, err) })
		}
	}
}
