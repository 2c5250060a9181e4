// Package taskctx holds the context key under which a worker passes a task
// to its handler. framework reads it (framework.TaskFromContext); package
// jetflowtest sets it to run a handler outside a worker, as a worker would.
package taskctx

import "context"

// Key is the context key of the task. The worker's handler contexts answer
// it without a context.WithValue (framework/handlerctx.go).
type Key struct{}

// With returns a copy of ctx that carries task (a *framework.Task).
func With(ctx context.Context, task any) context.Context {
	return context.WithValue(ctx, Key{}, task)
}

// Of returns the task ctx carries, or nil.
func Of(ctx context.Context) any { return ctx.Value(Key{}) }
