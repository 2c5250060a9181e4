package dispatch

import "time"

// YieldAfter is the handler time an executor runs back to back before it
// yields the processor. Handlers shorter than this (no-op tasks in a drain)
// yield once per several tasks, so the cost per task stays small; longer
// ones, once per task (decision 028).
const YieldAfter = 50 * time.Microsecond

// Turn is how long an executor goroutine has run handlers since it last
// yielded or blocked. The zero value is a fresh turn.
type Turn struct{ from time.Time }

// Ran records a handler that ran from start to end and reports whether the
// executor has now used its turn; the next turn starts with the next handler.
func (t *Turn) Ran(start, end time.Time) bool {
	if start.IsZero() {
		return false // no handler ran (a task that failed its checks)
	}
	if t.from.IsZero() {
		t.from = start
	}
	if end.Sub(t.from) < YieldAfter {
		return false
	}
	t.from = time.Time{}
	return true
}
