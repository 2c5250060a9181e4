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
// value. See [Worker.Register] for panics.
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
	w.Register(taskType, TypedHandler(w.opts.codec, fn), opts...)
}

// TypedHandler returns the handler [Handle] registers: it decodes the
// payload into a T with codec c (nil means [JSONCodec]; a []byte T receives
// the raw payload) and calls fn, or fails the task permanently with a
// *[DecodeError] when the payload cannot be decoded.
func TypedHandler[T any](c Codec, fn func(ctx context.Context, t *Task, payload T) error) Handler {
	if c == nil {
		c = JSONCodec()
	}
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		var v T
		if err := decodePayload(c, t, &v); err != nil {
			return Permanent(err)
		}
		return fn(ctx, t, v)
	})
}

func decodePayload(codec Codec, t *Task, v any) error {
	if pb, ok := v.(*[]byte); ok {
		*pb = t.Payload
		return nil
	}
	enc := truncate(t.Header(HeaderEncoding), 64) // from the wire: bounded before it reaches an error text
	name := codec.Name()
	if enc == taskmsg.EncodingRaw && name != taskmsg.EncodingRaw {
		return &DecodeError{TaskType: t.Type, Encoding: enc,
			Err: fmt.Errorf("payload is raw bytes; only a []byte payload can receive it")}
	}
	if enc != "" && enc != taskmsg.EncodingRaw && enc != name {
		return &DecodeError{TaskType: t.Type, Encoding: enc,
			Err: fmt.Errorf("payload was encoded with codec %q but the worker uses %q", enc, name)}
	}
	if len(t.Payload) == 0 {
		return nil // zero value
	}
	if err := codec.Unmarshal(t.Payload, v); err != nil {
		if enc == "" {
			enc = name
		}
		return &DecodeError{TaskType: t.Type, Encoding: enc, Err: err}
	}
	return nil
}
