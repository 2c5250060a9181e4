package framework

import (
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

// startWaits is liveness.StartWaits under the name ordering.go uses.
type startWaits struct{ liveness.StartWaits }

// waitingFor runs step, noting it among the steps Start waits for.
func (s *startWaits) waitingFor(what string, step func() error) error {
	return s.WaitingFor(what, step)
}
