// Package jetflowtest runs a task handler without a NATS server and reports
// what a worker would do with the task: acknowledge it, retry it after a
// delay, or fail it for good (dead-letter it), and whether the handler
// panicked. Build a task in memory with [NewTask] (payload, attempt,
// headers, due time), run an untyped handler with [Run] or a typed one with
// [RunTyped], and assert on the returned [framework.Outcome].
//
//	task := jetflowtest.NewTask("emails.send", Email{To: "a@example.com"}, jetflowtest.Attempt(3))
//	out := jetflowtest.RunTyped(ctx, sendEmail, task)
//	if out.Action != framework.ActionRetry { … }
//
// The decision is the worker's own (the same function decides both), under
// the policy given with [RunOption]s: the type's backoff
// ([WithBackoff]), whether dead letters are on ([WithDeadLetters]) and the
// attempt timeout ([WithTimeout]). The harness does not wait for a task's
// due time, and features that need a worker ([framework.SetResult],
// [github.com/jetflow-io/jetflow/effects.Once], [github.com/jetflow-io/jetflow/breaker.Call]) return their "not in a handler"
// errors; test those against an embedded server (package testutil).
package jetflowtest
