// Package testenv is the shared test set-up of the packages built on
// framework (breaker, ratelimit, effects, handlers): [testutil.Env] with a
// framework client, workers on connections of their own, and an enqueue
// that fails the test on error. It lives apart from testutil because
// framework's own tests use testutil, which therefore cannot import
// framework.
package testenv
