package framework

import (
	"context"
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

// step runs a start-up step named what, noted among the steps Start waits
// for while it runs, retrying with backoff while the server is unreachable,
// until ctx ends. Each attempt gets a context of its own with a deadline of
// [startAttempt] within ctx's: an attempt that runs out of it (a request
// nobody answered) is tried again.
func (w *Worker) step(ctx context.Context, what string, step func(ctx context.Context) error) error {
	return w.starting.WaitingFor(what, func() error {
		return liveness.StartStep(ctx, w.nc, w.log, LogKeyError, func() error {
			actx, cancel := context.WithTimeout(ctx, startAttempt)
			defer cancel()
			return step(actx)
		})
	})
}
