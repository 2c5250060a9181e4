package liveness

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

// WaitClosed waits until nc is closed for good (nats.go gave up
// reconnecting, or something closed it) and returns true, or until stop is
// closed and returns false.
func WaitClosed(nc *nats.Conn, stop <-chan struct{}) bool {
	ch := nc.StatusChanged(nats.CLOSED)
	defer nc.RemoveStatusListener(ch)
	if nc.IsClosed() {
		return true
	}
	select {
	case <-ch:
		return true
	case <-stop:
		return false
	}
}

// startRetry spaces the attempts of a start-up step while the server is
// unreachable: 100 ms doubling up to 5 s.
var startRetry = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// startRetryable reports whether a start-up step failed because the server
// is unreachable or not ready, as opposed to a missing topology or an
// invalid configuration, which no wait repairs.
func startRetryable(nc *nats.Conn, err error) bool {
	if nc.IsClosed() {
		return false
	}
	return !nc.IsConnected() || natserr.Transient(err) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrNoServers)
}

// StartStep runs a start-up step, retrying with backoff (logged on log)
// while the server behind nc is unreachable, until ctx ends. An error of
// the step after nc closed for good wraps [natserr.ErrNotConnected].
func StartStep(ctx context.Context, nc *nats.Conn, log *slog.Logger, logKeyError string, step func() error) error {
	b := startRetry.New()
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil || ctx.Err() != nil || !startRetryable(nc, err) {
			if err != nil && nc.IsClosed() {
				return fmt.Errorf("%w: %w", natserr.ErrNotConnected, err)
			}
			return err
		}
		d := b.NextBackOff()
		log.Warn("jetflow worker waiting for NATS to start", slog.Int("attempt", attempt),
			slog.Duration("retry_in", d), slog.Any(logKeyError, err))
		if !retry.Sleep(ctx, d) {
			return fmt.Errorf("%w (while waiting for NATS: %w)", ctx.Err(), err)
		}
	}
}
