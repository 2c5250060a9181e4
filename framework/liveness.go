package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/retry"
)

// A worker never dies silently: Start waits for an unreachable server
// instead of failing at once, and Run returns an error when the connection
// is closed for good (nats.go gave up reconnecting, or something closed it),
// so that the process supervisor restarts the program. A worker whose
// connection is closed consumes nothing, ever: staying alive would hide it.

// startRetry spaces Start's attempts while the server is unreachable:
// 100 ms doubling up to 5 s.
var startRetry = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// startRetryable reports whether a start-up step failed because the server
// is unreachable or not ready, as opposed to a missing topology or an
// invalid configuration, which no wait repairs.
func (w *Worker) startRetryable(err error) bool {
	if w.nc.IsClosed() {
		return false
	}
	return !w.nc.IsConnected() || natserr.Transient(err) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrNoServers)
}

// watchConnection closes w.connLost when the connection is closed for good
// while the worker runs. It returns when the worker stops.
func (w *Worker) watchConnection() {
	ch := w.nc.StatusChanged(nats.CLOSED)
	defer w.nc.RemoveStatusListener(ch)
	if !w.nc.IsClosed() {
		select {
		case <-ch:
		case <-w.stopFetch:
			return
		}
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

// startStep runs a start-up step, retrying with backoff while the server is
// unreachable, until ctx ends.
func (w *Worker) startStep(ctx context.Context, step func() error) error {
	b := startRetry.New()
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil || ctx.Err() != nil || !w.startRetryable(err) {
			if err != nil && w.nc.IsClosed() {
				return fmt.Errorf("%w: %w", ErrNotConnected, err)
			}
			return err
		}
		d := b.NextBackOff()
		w.log.Warn("jetflow worker waiting for NATS to start", slog.Int("attempt", attempt),
			slog.Duration("retry_in", d), slog.Any(LogKeyError, err))
		if !retry.Sleep(ctx, d) {
			return fmt.Errorf("%w (while waiting for NATS: %w)", ctx.Err(), err)
		}
	}
}
