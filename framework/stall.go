package framework

import (
	"fmt"
	"log/slog"
	"time"
)

// A worker whose fetch loop hears nothing from the server for the stall
// limit consumes nothing; Run returns [ErrPullStalled] rather than keep a
// process alive that does no work. A loop waiting for a free slot is busy,
// not stalled (long handlers are not a stall).

// watchStalls closes w.stalled when a fetch loop stalls beyond the stall
// limit while the worker runs. It returns when the worker stops.
func (w *Worker) watchStalls() {
	limit := w.opts.stallLimit
	tick := time.NewTicker(min(max(limit/4, 10*time.Millisecond), 5*time.Second))
	defer tick.Stop()
	for {
		select {
		case <-w.stopFetch:
			return
		case now := <-tick.C:
			if w.state.Load() != workerRunning {
				continue
			}
			if name, since, ok := w.health.stalled(now, w.startedAt(), limit); ok {
				err := fmt.Errorf("%w: consumer %s heard nothing from the server for %v (limit %v)",
					ErrPullStalled, name, since.Round(time.Millisecond), limit)
				w.log.Error("jetflow worker pull stalled; stopping", slog.Any(LogKeyError, err))
				w.stallErr.Store(&err)
				close(w.stalled)
				return
			}
		}
	}
}

// stalled returns a fetch loop that has not polled for longer than limit
// (counting from start when it never polled) and is not busy.
func (h *healthState) stalled(now, start time.Time, limit time.Duration) (string, time.Duration, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for name, l := range h.loops {
		if l.busy.Load() {
			l.busySeen.Store(now.UnixNano())
			continue
		}
		last := start
		if ns := max(l.polled.Load(), l.busySeen.Load()); ns > 0 {
			last = time.Unix(0, ns)
		}
		if since := now.Sub(last); since > limit {
			return name, since, true
		}
	}
	return "", 0, false
}
