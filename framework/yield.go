package framework

import "runtime"

// Executors yield the processor between tasks.
//
// An executor that takes its next task straight from the pull buffer
// (takeBuffered) never blocks while the backlog lasts, and Go preempts a
// running goroutine only after 10 ms. With CPU-bound handlers every
// processor then stays with an executor, and each goroutine on the way from
// the server to a handler (the connection's reader, the subscription's
// dispatcher, the fetch loop; with an embedded server, the server's own)
// waits for preemption: a critical task stored behind a busy low backlog took
// 7–16 ms to reach the worker's pull buffer, most of it in that queue. So an
// executor that has run handlers for dispatch.YieldAfter since it last gave up the
// processor yields once it settled its task and before it takes the next:
// the goroutines that were waiting run, and a task of a higher priority
// offered meanwhile gets the slot.

// yield gives the processor to other goroutines: runtime.Gosched, or the
// worker's test hook.
func (w *Worker) yield() {
	if w.yieldHook != nil {
		w.yieldHook()
		return
	}
	runtime.Gosched()
}
