package framework

import (
	"context"
	"fmt"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/nats-io/nats.go"
)

// EnqueueTracer observes each task a [Client] publishes, around its
// publication, for tracing: it is called with the enqueue call's context
// once the task message is built and before it is sent, may add headers to
// it (a W3C traceparent, for example, which handlers read back from
// [Task.Headers]; delayed tasks keep them when their schedule fires), and
// returns a function called exactly once with the result: the task as
// stored, or the error of [Client.Enqueue] / [Client.EnqueueMany] for it.
// Tasks refused before a message is built (invalid type, options or
// payload) are not traced. A nil done function is allowed.
//
// The tracer and done run on the enqueueing goroutine and must be safe for
// concurrent use. A panic in either is recovered and logged.
type EnqueueTracer func(ctx context.Context, info TaskInfo, header EnqueueHeader) (done func(info TaskInfo, err error))

// EnqueueHeader gives an [EnqueueTracer] the headers of one task message.
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

// WithEnqueueTracer adds t to the tracers the client calls for each task
// it publishes (see [EnqueueTracer]), after those added before. Clients
// only.
func WithEnqueueTracer(t EnqueueTracer) ClientOption {
	return clientOnly(func(o *options) error {
		if t == nil {
			return fmt.Errorf("%w: nil enqueue tracer", ErrInvalidOption)
		}
		o.enqueueTracers = append(o.enqueueTracers, t)
		return nil
	})
}

// traceEnqueue calls the client's tracers for msg and returns the function
// that reports the result to each of them, in reverse order.
func (c *Client) traceEnqueue(ctx context.Context, msg *nats.Msg, info TaskInfo) func(TaskInfo, error) {
	tracers := c.opts.enqueueTracers
	if len(tracers) == 0 {
		return func(TaskInfo, error) {}
	}
	dones := make([]func(TaskInfo, error), 0, len(tracers))
	for _, t := range tracers {
		var done func(TaskInfo, error)
		callHook(c.opts.logger, nil, "EnqueueTracer", func() { done = t(ctx, info, EnqueueHeader{msg: msg}) })
		if done != nil {
			dones = append(dones, done)
		}
	}
	return func(info TaskInfo, err error) {
		for i := len(dones) - 1; i >= 0; i-- {
			callHook(c.opts.logger, nil, "EnqueueTracer done", func() { dones[i](info, err) })
		}
	}
}
