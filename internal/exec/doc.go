// Package exec runs a worker's dispatched tasks: a pool of long-lived
// executor goroutines ([Pool]) and the timers of tasks set aside to rerun
// later ([Parking]).
//
// Both are generic over the worker's pending task and know nothing of
// tasks, slots or the server: the worker decides what running, parking and
// resuming a task mean (internal/intake, internal/attempt).
package exec
