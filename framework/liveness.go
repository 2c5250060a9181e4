package framework

import (
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/liveness"
)

// A worker never dies silently: Start waits for an unreachable server
// instead of failing at once, and Run returns an error when the connection
// is closed for good (nats.go gave up reconnecting, or something closed it)
// or when a fetch loop hears nothing from the server for the stall limit,
// so that the process supervisor restarts the program. A worker that
// consumes nothing, ever, must not stay alive and hide it. A loop waiting
// for a free slot is busy, not stalled (long handlers are not a stall).
// The machinery is internal/liveness; package health reports it.

// The health report reads a worker's liveness through internal/liveness,
// not an exported method: it is plumbing between framework and package
// health.
func init() {
	liveness.Of = func(w any) liveness.Report { return w.(*Worker).liveness() }
}

// liveness returns w's state and the state of each fetch loop. It is safe
// to call at any time from any goroutine.
func (w *Worker) liveness() liveness.Report {
	return liveness.Report{State: liveness.State(w.state.Load()), Started: w.startedAt(), StallLimit: w.opts.stallLimit,
		Starting: w.starting.List(), Loops: w.in.FetchLoops()}
}

// Conn returns the worker's connection.
func (w *Worker) Conn() *nats.Conn { return w.nc }

// startedAt returns when the worker started, or the zero time.
func (w *Worker) startedAt() time.Time {
	if ns := w.started.Load(); ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// newWatcher returns the watcher that stops w's Run when its connection
// closed for good or a fetch loop stalled while it runs.
func (w *Worker) newWatcher() *liveness.Watcher {
	return liveness.NewWatcher(liveness.WatchConfig{Conn: w.nc, Log: w.log, LogKeyError: LogKeyError,
		Loops: &w.health, StallLimit: w.opts.stallLimit, Started: w.startedAt, ErrStalled: ErrPullStalled,
		Running: func() bool { return w.state.Load() == workerRunning }})
}
