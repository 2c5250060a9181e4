// Package circuit owns the engine of one circuit breaker: a gobreaker
// two-step breaker that trips on consecutive failures or on a failure
// ratio, whose state changes are recorded under gobreaker's lock and
// delivered outside it (so a callback may query the breaker again), that
// reports how long it stays open, and that another worker's report can
// force open; and the cluster side of a worker's breakers ([Cluster]):
// publishing state changes to the breaker bucket as [Record]s, pausing the
// consumers of the task types that declared a dependency, and opening
// local breakers that other workers report open.
//
// Package framework owns what a dependency's breaker means for tasks: the
// public settings and errors, the registry per dependency name, and which
// task types depend on it (breaker.go, breakers.go, breaker_worker.go).
package circuit
