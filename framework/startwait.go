package framework

import (
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/internal/liveness"
)

// A worker whose Start is slow says what it waits for: every start-up step
// that talks to the server (ensuring a consumer, an ordered partition's
// consumer) is noted while it runs; the liveness report
// (liveness.Report.Starting, internal/liveness) and so package health's
// report list them, and Start logs them at
// Warn every [slowStartReport] while any has waited that long. Each attempt
// of a step has a deadline of its own ([startAttempt]) within Start's, and
// each request ensuring a consumer one shorter still
// (topology.RequestTimeout), so one request nobody answers (a consumer's
// leader being elected) is tried again instead of holding Start.

// startAttempt bounds each attempt of a start-up step (a plugin's Prepare,
// ensuring a consumer) within Start's deadline: an attempt that runs out of
// it is tried again, with backoff, until Start's context ends. A step's
// requests each take milliseconds on a healthy server.
const startAttempt = 10 * time.Second

// slowStartReport is how long a start-up step may wait before Start logs
// what it waits for, and how often it logs again while it still waits.
const slowStartReport = 5 * time.Second

// startWaits records the start-up steps under way. The zero value is ready
// to use; it is safe for concurrent use.
type startWaits struct {
	mu      sync.Mutex
	pending map[string]time.Time
}

// waitingFor runs step, noting what among the steps Start waits for while
// it runs.
func (s *startWaits) waitingFor(what string, step func() error) error {
	s.mu.Lock()
	if s.pending == nil {
		s.pending = make(map[string]time.Time)
	}
	s.pending[what] = time.Now()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pending, what)
		s.mu.Unlock()
	}()
	return step()
}

// list returns the steps under way, the longest waiting first.
func (s *startWaits) list() []liveness.StartWait {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]liveness.StartWait, 0, len(s.pending))
	for _, what := range slices.Sorted(maps.Keys(s.pending)) {
		out = append(out, liveness.StartWait{What: what, Since: s.pending[what]})
	}
	slices.SortStableFunc(out, func(a, b liveness.StartWait) int { return a.Since.Compare(b.Since) })
	return out
}

// reportSlowStart logs at Warn, every slowStartReport, the start-up steps
// that have waited that long, until the returned function is called.
func (w *Worker) reportSlowStart() (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(slowStartReport)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				var slow []string
				for _, sw := range w.starting.list() {
					if d := now.Sub(sw.Since); d >= slowStartReport {
						slow = append(slow, sw.What+" for "+d.Round(time.Second).String())
					}
				}
				if len(slow) > 0 {
					w.log.Warn("jetflow worker start is slow; waiting for the server to answer",
						slog.String("waiting_for", strings.Join(slow, ", ")),
						slog.Duration("since_start", now.Sub(w.startedAt()).Round(time.Second)))
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}
