package framework

import "context"

// Handler runs tasks. The returned error decides what happens to the task:
// nil acks it; [Permanent] fails it without retry; [RetryAfter] retries at a
// given delay; any other error retries it after the type's backoff. Handlers
// never ack by hand. Panics are recovered and treated as errors.
type Handler interface {
	// Handle runs one attempt of t; ctx ends at the attempt's timeout or
	// when the worker gives up waiting at shutdown.
	Handle(ctx context.Context, t *Task) error
}

// HandlerFunc adapts a function to [Handler].
type HandlerFunc func(ctx context.Context, t *Task) error

// Handle calls f(ctx, t).
func (f HandlerFunc) Handle(ctx context.Context, t *Task) error { return f(ctx, t) }

// Middleware wraps a handler, like net/http middleware.
type Middleware func(Handler) Handler

// Chain wraps h in mw. The first middleware is the outermost: it runs first
// and sees the final result last.
func Chain(h Handler, mw ...Middleware) Handler {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}
