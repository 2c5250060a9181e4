// Package attemptctx owns the context of one handler attempt: a deadline
// and one carried value (the task), answered from its own fields, with the
// real context (a runtime timer and a registration with the parent) created
// only when a handler asks for Done, Err or another value.
//
// context.WithTimeoutCause arms a runtime timer and registers the child with
// the worker's context for every attempt; for short tasks that was a tenth
// of the worker's own CPU (docs/benchmarks.md, decision 021). A handler that
// never looks at its context's Done channel, Err or a value other than its
// task needs neither, so [Attempt] answers Deadline and the value itself and
// creates the real context (with the same parent, deadline and cause) the
// first time anything else is asked. A handler, a hook or a derived context
// sees exactly what WithTimeoutCause would give it, and an attempt that
// outlives its deadline without asking is still reported as timed out
// ([Attempt.TimedOut]).
package attemptctx
