// Package heartbeat owns the worker's heartbeats: one [Sweeper] goroutine
// per worker sends InProgress for every task the worker holds — waiting for
// a slot, waiting for its due time, running, or held aside — and for the
// messages still queued in its pull iterators, instead of a timer per task,
// which measurably costs throughput (docs/benchmarks.md).
//
// A task gets its heartbeat once the next sweep would come later than its
// type's heartbeat interval after the server last heard of it, so the
// interval between two signals of a task is within (heartbeat − tick,
// heartbeat]; [Tick] chooses the sweep interval from the heartbeat
// intervals. The worker tells the sweeper which tasks it holds and what to
// do when a heartbeat cannot be sent; the package knows nothing of workers.
package heartbeat
