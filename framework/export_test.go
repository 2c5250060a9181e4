package framework

import "time"

// WaitingForTest returns how many fetched tasks of priority p wait for a free
// slot in w's dispatcher. Tests use it to make sure the dispatcher has a real
// choice to make before a slot frees up.
func (w *Worker) WaitingForTest(p Priority) int {
	return w.in.NumWaiting(p.Rank())
}

// PullResizesForTest returns how many times the fetchers of taskType resized
// their pulls (internal/intake).
func (w *Worker) PullResizesForTest(taskType string) uint64 {
	for _, tt := range w.order {
		if tt.name == taskType {
			return tt.in.Pace.Resizes()
		}
	}
	return 0
}

// SetYieldForTest makes w's executors call f instead of runtime.Gosched when
// they yield between tasks (internal/attempt). Call it before Start.
func (w *Worker) SetYieldForTest(f func()) { w.yieldHook = f; w.attempts = w.newExecutor() }

// SetWallClockForTest makes w compare delayed tasks' due times with f
// instead of the wall clock (execute.go, newExecutor). Call it before Start.
func (w *Worker) SetWallClockForTest(f func() time.Time) {
	w.wallHook = f
	w.attempts = w.newExecutor()
}

// PullSizeAtForTest returns the batch the next pull request of (taskType,
// prio) would ask for at now (internal/intake); 0 for an unknown type.
func (w *Worker) PullSizeAtForTest(taskType string, prio Priority, now time.Time) int {
	for _, tt := range w.order {
		if tt.name == taskType {
			return w.in.PullSize(&tt.in, prio, now)
		}
	}
	return 0
}

// StartedDirectForTest returns how many tasks w started from a pull
// buffer's subscription, without its fetch loop (internal/intake,
// startDirect).
func (w *Worker) StartedDirectForTest() uint64 { return w.stats.startedDirect.Load() }

// SetAckTimeoutForTest shortens the wait of c's EnqueueMany and EnqueueSeq
// for an acknowledgement before they publish the job again.
func (c *Client) SetAckTimeoutForTest(d time.Duration) { c.ackTimeout = d }
