package framework

import (
	"context"
	"fmt"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// Handle registers a typed handler: the payload is decoded into a T with the
// worker's codec (a []byte T receives the raw payload) before fn runs. A
// payload that cannot be decoded fails the task permanently with a
// *[DecodeError]; it is never retried. So does a payload marked raw bytes
// ([HeaderEncoding] "raw") when T is not []byte. An empty payload, which is
// what [Client.Enqueue] stores for a nil payload, decodes to T's zero
// value. A payload with fields T has no place for (a payload of another
// type, a renamed field) decodes by default, those fields dropped; with
// [StrictPayload] it is a *[DecodeError]. See [Worker.Register] for panics.
func Handle[T any](w *Worker, taskType string, fn func(ctx context.Context, t *Task, payload T) error, opts ...HandlerOption) {
	if fn == nil {
		panic(fmt.Sprintf("framework: nil handler for task type %q", taskType))
	}
	if named, ok := namedType[T](); ok && named != taskType {
		// The payload names its type: a handler registered under another
		// would receive tasks enqueued for that one.
		var zero T
		panic(fmt.Sprintf("framework: handler of %T registered for task type %q, but %T names %q (use HandleArgs)", zero, taskType, zero, named))
	}
	w.register(taskType, nil, func(cfg *handlerConfig) Handler {
		if v, ok := versionOf[T](); ok && cfg.versions == nil {
			cfg.versions = upTo(v) // versions.go
		}
		return typedHandler(w.opts.codec, cfg.strictPayload, fn)
	}, opts)
}

// StrictPayload makes the payloads of a typed handler ([Handle],
// [HandleArgs]) decode strictly: a payload with a field the handler's type
// has no place for (a payload of another struct, a field renamed on one
// side), or with data after the value, fails the task permanently with a
// *[DecodeError], dead-lettered with reason decode, instead of running the
// handler on a value whose missing fields are zero. An empty payload still
// decodes to the zero value. The worker's codec must implement
// [StrictCodec] ([JSONCodec] does); registering a handler of the string API
// ([Worker.Register], [Worker.HandleFunc]) with it panics, as it would have
// no effect. Default off: unknown fields are dropped, so producers may add
// fields before the workers know them.
func StrictPayload() HandlerOption {
	return func(c *handlerConfig) error { c.strictPayload = true; return nil }
}

// checkStrict refuses [StrictPayload] where it would have no effect.
func (w *Worker) checkStrict(cfg *handlerConfig, typed bool) error {
	if !cfg.strictPayload {
		return nil
	}
	if !typed {
		return fmt.Errorf("%w: StrictPayload applies to typed handlers (Handle, HandleArgs); this handler decodes its own payload", ErrInvalidOption)
	}
	if _, ok := w.opts.codec.(StrictCodec); !ok {
		return fmt.Errorf("%w: StrictPayload needs a codec that implements framework.StrictCodec; codec %q does not", ErrInvalidOption, w.opts.codec.Name())
	}
	return nil
}

// TypedHandler returns the handler [Handle] registers: it decodes the
// payload into a T with codec c (nil means [JSONCodec]; a []byte T receives
// the raw payload) and calls fn, or fails the task permanently with a
// *[DecodeError] when the payload cannot be decoded.
func TypedHandler[T any](c Codec, fn func(ctx context.Context, t *Task, payload T) error) Handler {
	return typedHandler(c, false, fn)
}

func typedHandler[T any](c Codec, strict bool, fn func(ctx context.Context, t *Task, payload T) error) Handler {
	if c == nil {
		c = JSONCodec()
	}
	unmarshal := c.Unmarshal
	if sc, ok := c.(StrictCodec); ok && strict {
		unmarshal = sc.UnmarshalStrict
	}
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		var v T
		if err := decodeWith(c, unmarshal, t, &v); err != nil {
			return Permanent(err)
		}
		return fn(ctx, t, v)
	})
}

func decodePayload(codec Codec, t *Task, v any) error {
	return decodeWith(codec, codec.Unmarshal, t, v)
}

// decodeWith decodes t's payload into v with unmarshal, a method of codec
// (taskmsg.Decode), or returns the *DecodeError of a payload it cannot.
func decodeWith(codec Codec, unmarshal func([]byte, any) error, t *Task, v any) error {
	enc, err := taskmsg.Decode(codec, unmarshal, t.Header(HeaderEncoding), t.Payload, v)
	if err != nil {
		return &DecodeError{TaskType: t.Type, Encoding: enc, Err: err}
	}
	return nil
}
