package framework

import (
	"context"
	"fmt"
	"log/slog"
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
	lv := liveness.Report{State: liveness.State(w.state.Load()), Started: w.startedAt(), StallLimit: w.opts.stallLimit,
		Starting: w.starting.List()}
	for _, tt := range w.order {
		for _, p := range tt.cfg.priorities {
			name := w.names.ConsumerName(tt.name, p)
			l := w.health.Loop(name)
			lv.Loops = append(lv.Loops, liveness.FetchLoop{Type: tt.name, Priority: p, Consumer: name, LastPoll: l.LastPoll(), Busy: l.Busy()})
		}
	}
	return lv
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

// watchConnection closes w.connLost when the connection is closed for good
// while the worker runs. It returns when the worker stops.
func (w *Worker) watchConnection() {
	if !liveness.WaitClosed(w.nc, w.in.Stopped()) {
		return
	}
	w.log.Error("jetflow worker connection closed for good; stopping", slog.Any(LogKeyError, w.nc.LastError()))
	close(w.connLost)
}

// errConnLost is what Run returns after the connection closed for good.
func (w *Worker) errConnLost() error {
	if last := w.nc.LastError(); last != nil {
		return fmt.Errorf("framework: worker stopped: connection closed: %w: %w", ErrNotConnected, last)
	}
	return fmt.Errorf("framework: worker stopped: connection closed: %w", ErrNotConnected)
}

// watchStalls closes w.stalled when a fetch loop stalls beyond the stall
// limit while the worker runs. It returns when the worker stops.
func (w *Worker) watchStalls() {
	limit := w.opts.stallLimit
	running := func() bool { return w.state.Load() == workerRunning }
	name, since, ok := w.health.Watch(w.in.Stopped(), limit, running, w.startedAt)
	if !ok {
		return
	}
	err := fmt.Errorf("%w: consumer %s heard nothing from the server for %v (limit %v)",
		ErrPullStalled, name, since.Round(time.Millisecond), limit)
	w.log.Error("jetflow worker pull stalled; stopping", slog.Any(LogKeyError, err))
	w.stallErr.Store(&err)
	close(w.stalled)
}

// startStep runs a start-up step, retrying with backoff while the server is
// unreachable, until ctx ends. Each attempt gets a context of its own with
// a deadline of [startAttempt] within ctx's (startwait.go): an attempt that
// runs out of it (a request nobody answered) is tried again.
func (w *Worker) startStep(ctx context.Context, step func(ctx context.Context) error) error {
	return liveness.StartStep(ctx, w.nc, w.log, LogKeyError, func() error {
		actx, cancel := context.WithTimeout(ctx, startAttempt)
		defer cancel()
		return step(actx)
	})
}
