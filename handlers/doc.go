// Package handlers provides middleware and helpers for jetflow handlers. It
// is built only on the public API of package [framework]: everything here
// could live in user code, and serves as an example of how to write
// middleware.
//
// # Using middleware
//
// A [framework.Middleware] wraps a [framework.Handler]. Install it for every
// task type of a worker with [framework.WithMiddleware], or for one type with
// [framework.WithTypeMiddleware]. The first middleware given runs outermost:
// it starts first and sees the final result last. Worker middleware runs
// outside type middleware.
//
//	w, err := framework.NewWorker(nc,
//		framework.WithLogger(logger),
//		framework.WithMiddleware(handlers.Logging(nil)),
//	)
//	...
//	framework.Handle(w, "images.resize", resize,
//		framework.WithTypeMiddleware(
//			handlers.Timeout(20*time.Second),
//			handlers.PermanentIf(func(err error) bool { return errors.Is(err, image.ErrFormat) }),
//		))
//
// # Middleware in this package
//
//   - [Logging] logs the start, end, duration and error of every attempt, with
//     the [framework.LogKeyTaskID] family of attributes. It never logs
//     payloads.
//   - [Timeout] bounds one attempt inside the chain, for a tighter bound than
//     the type's [framework.WithTimeout] on part of the work or on every type
//     of a worker at once.
//   - [PermanentIf] turns the errors a predicate selects into
//     [framework.Permanent] failures, so that they are not retried.
//
// Panics are recovered by the worker itself, outside all middleware, so this
// package has no recovery middleware.
//
// # Writing middleware
//
// Middleware sees the task ([framework.Task]) and the handler's error, and
// may return a different error; the error that leaves the outermost
// middleware decides the task's fate (nil acks it, [framework.Permanent]
// fails it, [framework.RetryAfter] retries it after a given delay, any other
// error retries it with backoff). Middleware must not keep the task after
// the call returns and must be safe for concurrent use: one instance serves
// every task of the types it is installed on.
package handlers
