package framework

import "github.com/jetflow-io/jetflow/internal/attemptctx"

// The context of one handler attempt, with the type's timeout as its
// deadline (cause ErrHandlerTimeout) and the task as a value, built only as
// far as the handler uses it (internal/attemptctx).

// handlerCtx is the context of one attempt.
type handlerCtx = attemptctx.Attempt

// taskCtx is the worker's context carrying a task under execution, what
// context.WithValue(ctx, taskctx.Key{}, t) gives, without an allocation of its
// own (it lives in the pending task).
type taskCtx = attemptctx.WithValue
