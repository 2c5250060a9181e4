package framework

import (
	"context"
	"fmt"
)

// TaskArgs is a payload type that names its task type, as River's JobArgs
// names its kind. Binding the two in the payload's type makes the typed API
// ([Client.EnqueueArgs], [HandleArgs], [Spec]) unable to send a payload to
// the handler of another type: a Charge is enqueued as the type Charge
// names, and only the handler that takes a Charge registers that type. A
// type that does not implement TaskArgs does not compile there.
//
// Declare TaskType on the value receiver and return a constant:
//
//	type Charge struct{ OrderID string }
//
//	func (Charge) TaskType() string { return "payments.charge" }
//
// [HandleArgs] calls it on T's zero value. The string API ([Client.Enqueue],
// [Handle]) stays for payloads written by other languages or the nats CLI.
type TaskArgs interface {
	// TaskType returns the task type of the payload, a valid type name
	// (see [Client.Enqueue]).
	TaskType() string
}

// EnqueueArgs enqueues args as a task of the type args names, like
// [Client.Enqueue] with args.TaskType() as the type.
func (c *Client) EnqueueArgs(ctx context.Context, args TaskArgs, opts ...EnqueueOption) (TaskInfo, error) {
	if args == nil {
		return TaskInfo{}, fmt.Errorf("%w: nil task arguments", ErrInvalidOption)
	}
	return c.Enqueue(ctx, args.TaskType(), args, opts...)
}

// Spec returns the [TaskSpec] of args for [Client.EnqueueMany]: its type is
// the one args names.
func Spec(args TaskArgs, opts ...EnqueueOption) TaskSpec {
	return TaskSpec{Type: args.TaskType(), Payload: args, Options: opts}
}

// HandleArgs registers fn for the task type T names, decoding each payload
// into a T like [Handle]. It panics (see [Worker.Register]) when T's
// TaskType is not a valid type name, or when calling it on T's zero value
// panics (a pointer T whose method reads through its receiver).
func HandleArgs[T TaskArgs](w *Worker, fn func(ctx context.Context, t *Task, args T) error, opts ...HandlerOption) {
	Handle(w, argsType[T](), fn, opts...)
}

// argsType returns the task type T names.
func argsType[T TaskArgs]() (typ string) {
	var zero T
	defer func() {
		if r := recover(); r != nil {
			panic(fmt.Sprintf("framework: %T.TaskType panics on the zero value (declare it on the value receiver): %v", zero, r))
		}
	}()
	return zero.TaskType()
}

// namedType returns the task type T names, and false when T is not
// [TaskArgs] or its TaskType cannot be called on the zero value (a nil
// pointer).
func namedType[T any]() (typ string, ok bool) {
	var zero T
	a, isArgs := any(zero).(TaskArgs)
	if !isArgs {
		return "", false
	}
	defer func() {
		if recover() != nil {
			typ, ok = "", false
		}
	}()
	return a.TaskType(), true
}
