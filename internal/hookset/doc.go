// Package hookset fans a worker's events out to its plugins and its hooks:
// framework's [Plugin] callbacks on a task's path and the worker events of
// its public Hooks.
//
// # Plugins and hooks
//
// A [Set] holds both. Plugins ([Plugin], added with [Set.Use]) are the
// engine's own path: they run first, in the order they were added, and a
// panic in one is not recovered. Hooks ([Hooks], added with [Set.Add] and
// [Set.Insert]) are the user's: each call is recovered, its panic logged
// with its stack and counted, and the worker goes on as if the callback had
// returned. [Set.Insert] places a set before those given with [Set.Add],
// which is how a worker's AddHooks sets run before its WithHooks ones.
//
// # Cost
//
// [Set.Started] and [Set.Finished] run for every task: they call each hook
// through a method that defers the recovery, allocating nothing.
//
// [Call] and [Recover] recover any other callback the same way (a client's
// Enqueued and Enqueuing hooks). The package knows nothing of workers or
// tasks: T is the task type the callbacks receive, O an attempt's outcome.
package hookset
