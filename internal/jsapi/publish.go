package jsapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/retry"
)

// Publish retry tuning. Each attempt waits at most PublishAttemptTimeout for
// the stream's acknowledgement: a stream leader that steps down drops the
// proposals in flight without answering, so waiting longer only stalls the
// producer, and a second attempt is harmless (same Nats-Msg-Id).
const PublishAttemptTimeout = 2 * time.Second

// publishRetry spaces the attempts of a publish.
var publishRetry = retry.Policy{Min: 25 * time.Millisecond, Max: time.Second, Jitter: 0.5}

// Publish stores msg in stream and returns the stream's acknowledgement.
// While the stream cannot answer (no leader during an election, a
// restarting server, a lost acknowledgement) it retries with the same
// message: its Nats-Msg-Id makes the stream store it once however many
// attempts reach it. It gives up when ctx ends, on an error that retrying
// cannot fix (natserr.Transient), or when the stream does not exist. An ack
// reporting a duplicate after an attempt that may have been stored is
// reported as not duplicate: it is most likely our own.
func Publish(ctx context.Context, js jetstream.JetStream, stream string, msg *nats.Msg, log *slog.Logger) (*jetstream.PubAck, error) {
	return PublishWithin(ctx, js, stream, msg, log, 0)
}

// PublishWithin is [Publish], bounded by limit, counted from the call,
// when ctx has no deadline (limit 0: no bound but ctx). A publish stored
// at the first attempt, the usual case, costs one context with a timeout,
// as a plain jetstream PublishMsg does; the bound and the backoff are
// set up only for a retry.
func PublishWithin(ctx context.Context, js jetstream.JetStream, stream string, msg *nats.Msg, log *slog.Logger, limit time.Duration) (*jetstream.PubAck, error) {
	first := PublishAttemptTimeout
	if limit > 0 && limit < first {
		first = limit
	}
	actx, cancel := context.WithTimeout(ctx, first)
	ack, err := publishOnce(actx, js, stream, msg)
	// When ctx has no deadline, the attempt's is the call's start plus
	// first: the bound of the retries is counted from there.
	attemptDeadline, _ := actx.Deadline()
	cancel()
	if err == nil {
		return ack, nil
	}
	if ctx.Err() != nil || !natserr.Transient(err) {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok && limit > 0 {
		start := attemptDeadline.Add(-first)
		var cancelAll context.CancelFunc
		ctx, cancelAll = context.WithDeadline(ctx, start.Add(limit))
		defer cancelAll()
	}
	return publishRetrying(ctx, js, stream, msg, log, err)
}

// publishRetrying goes on with a publish whose first attempt failed with
// the transient error first.
func publishRetrying(ctx context.Context, js jetstream.JetStream, stream string, msg *nats.Msg, log *slog.Logger, first error) (*jetstream.PubAck, error) {
	wait := publishRetry.New()
	maybeStored := false   // an earlier attempt may have been stored
	checkedStream := false // the stream was asked about
	var refused error      // the question was refused (ErrLookupRefused)
	unavailable := func(err error) error {
		switch {
		case refused != nil && (natserr.NoResponse(err) || ctx.Err() != nil):
			// Retried until ctx ended without an answer (the last
			// attempt may have been cut by the deadline), and unable to
			// ask why: say both.
			return fmt.Errorf("no stream took the message before the enqueue's deadline (%w), and this connection cannot ask whether %s exists (%w): "+
				"the topology is missing, or the stream had no leader all that time (last attempt: %w)", jetstream.ErrNoStreamResponse, stream, refused, err)
		case checkedStream && natserr.NoResponse(err):
			// Not a missing topology: the stream exists but has no leader.
			return fmt.Errorf("stream %s did not answer (electing a leader or restarting?): %w", stream, ctx.Err())
		}
		return err
	}
	err := first
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			actx, cancel := context.WithTimeout(ctx, PublishAttemptTimeout)
			var ack *jetstream.PubAck
			ack, err = publishOnce(actx, js, stream, msg)
			cancel()
			if err == nil {
				if ack.Duplicate && maybeStored {
					ack.Duplicate = false
				}
				log.Debug("jetflow publish stored after retries", slog.String("task_id", msg.Header.Get(jetstream.MsgIDHeader)),
					slog.Int("attempts", attempt))
				return ack, nil
			}
			if ctx.Err() != nil || !natserr.Transient(err) {
				return nil, unavailable(err)
			}
		}
		if natserr.NoResponse(err) {
			// Nobody took the message: either the stream has no leader
			// right now, or it does not exist. Ask once which.
			// A producer that may not ask (no STREAM.INFO permission,
			// or an account of its own without JetStream) cannot tell:
			// it keeps retrying, so that a leader election does not fail
			// its enqueue, and says at the end that it could not ask.
			if !checkedStream {
				checkedStream = true
				sctx, scancel := context.WithTimeout(ctx, PublishAttemptTimeout)
				exists, serr := StreamExists(sctx, js.Conn(), stream)
				scancel()
				switch {
				case serr == nil && !exists:
					return nil, err
				case errors.Is(serr, ErrLookupRefused):
					refused = serr
				}
			}
		} else {
			maybeStored = true
		}
		d := wait.NextBackOff()
		log.Debug("jetflow publish not acknowledged; retrying", slog.String("task_id", msg.Header.Get(jetstream.MsgIDHeader)),
			slog.Int("attempt", attempt), slog.Duration("retry_in", d), slog.Any("error", err))
		if !retry.Sleep(ctx, d) {
			return nil, unavailable(err)
		}
	}
}
