package framework

import (
	"runtime"
	"time"
)

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
// executor that has run handlers for yieldAfter since it last gave up the
// processor yields once it settled its task and before it takes the next:
// the goroutines that were waiting run, and a task of a higher priority
// offered meanwhile gets the slot.

// yieldAfter is the handler time an executor runs back to back before it
// yields. Handlers shorter than this (no-op tasks in a drain) yield once per
// several tasks, so the cost per task stays small; longer ones, once per task.
const yieldAfter = 50 * time.Microsecond

// yield gives the processor to other goroutines: runtime.Gosched, or the
// worker's test hook.
func (w *Worker) yield() {
	if w.yieldHook != nil {
		w.yieldHook()
		return
	}
	runtime.Gosched()
}

// turn is how long an executor goroutine has run handlers since it last
// yielded or blocked.
type turn struct{ from time.Time }

// ran records a handler that ran from start to end and reports whether the
// executor has now used its turn; the next turn starts with the next handler.
func (t *turn) ran(start, end time.Time) bool {
	if start.IsZero() {
		return false // no handler ran (a task that failed its checks)
	}
	if t.from.IsZero() {
		t.from = start
	}
	if end.Sub(t.from) < yieldAfter {
		return false
	}
	t.from = time.Time{}
	return true
}
