package liveness

import (
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"
)

// StartWaits records the start-up steps of a worker under way (ensuring a
// consumer, an ordered partition's consumer), so that a slow Start says
// what it waits for: [Report.Starting] lists them and [StartWaits.ReportSlow]
// logs them. The zero value is ready to use; it is safe for concurrent use.
type StartWaits struct {
	mu      sync.Mutex
	pending map[string]time.Time
}

// WaitingFor runs step, noting what among the steps Start waits for while
// it runs.
func (s *StartWaits) WaitingFor(what string, step func() error) error {
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

// List returns the steps under way, the longest waiting first.
func (s *StartWaits) List() []StartWait {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]StartWait, 0, len(s.pending))
	for _, what := range slices.Sorted(maps.Keys(s.pending)) {
		out = append(out, StartWait{What: what, Since: s.pending[what]})
	}
	slices.SortStableFunc(out, func(a, b StartWait) int { return a.Since.Compare(b.Since) })
	return out
}

// Slow returns the steps that have waited at least limit at now, each as
// "what for duration", the longest waiting first.
func (s *StartWaits) Slow(now time.Time, limit time.Duration) []string {
	var slow []string
	for _, sw := range s.List() {
		if d := now.Sub(sw.Since); d >= limit {
			slow = append(slow, sw.What+" for "+d.Round(time.Second).String())
		}
	}
	return slow
}

// ReportSlow logs on log at Warn, every interval, the start-up steps that
// have waited that long (see [StartWaits.Slow]), with the time since
// started, until the returned function is called; stop returns once the
// reporting goroutine has ended.
func (s *StartWaits) ReportSlow(log *slog.Logger, every time.Duration, started func() time.Time) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-tick.C:
				if slow := s.Slow(now, every); len(slow) > 0 {
					log.Warn("jetflow worker start is slow; waiting for the server to answer",
						slog.String("waiting_for", strings.Join(slow, ", ")),
						slog.Duration("since_start", now.Sub(started()).Round(time.Second)))
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}
