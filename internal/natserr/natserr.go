package natserr

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The jetflow sentinels that NATS errors map to; package framework exports
// them.
var (
	ErrTopologyMissing = errors.New("framework: task stream missing (call streams.Ensure with the same prefix first)")
	ErrNotConnected    = errors.New("framework: not connected to NATS")
	ErrPayloadTooLarge = errors.New("framework: payload too large")
	ErrQueueFull       = errors.New("framework: task stream full (it refuses new tasks until workers make room)")
)

// ErrNoStream reports that no server answered a direct get: the stream does
// not exist (or does not allow direct gets).
var ErrNoStream = errors.New("framework: stream does not answer direct gets")

// Kind is the jetflow meaning of an error.
type Kind uint8

const (
	// Other is any error without a jetflow meaning.
	Other Kind = iota
	// NotConnected: the connection is closed, draining or reconnecting.
	NotConnected
	// TopologyMissing: no stream answered, or the stream does not exist.
	TopologyMissing
	// TooLarge: the message exceeds the server's or the stream's limit.
	TooLarge
	// QueueFull: the stream is at its size or message limit and refuses
	// new messages (discard-new).
	QueueFull
)

// Server error codes that mean "try again in a moment".
const (
	codeNoSuitablePeers jetstream.ErrorCode = 10005 // placement while peers are still joining
	codeTempUnavailable jetstream.ErrorCode = 10008 // JetStream system temporarily unavailable
	codeStoreFailed     jetstream.ErrorCode = 10077 // a store refused; the description says why
)

// Classify returns the jetflow meaning of err.
func Classify(err error) Kind {
	switch {
	case err == nil:
		return Other
	case errors.Is(err, nats.ErrConnectionClosed), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionReconnecting):
		return NotConnected
	case errors.Is(err, ErrNoStream), errors.Is(err, jetstream.ErrNoStreamResponse),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrStreamNotFound):
		return TopologyMissing
	case errors.Is(err, nats.ErrMaxPayload):
		return TooLarge
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum {
		return TooLarge
	}
	if errors.As(err, &apiErr) && apiErr.ErrorCode == codeStoreFailed && streamLimits[apiErr.Description] {
		return QueueFull
	}
	return Other
}

// streamLimits are the descriptions of a store refused at a discard-new
// stream's limits (nats-server's ErrMaxBytes and ErrMaxMsgs).
var streamLimits = map[string]bool{"maximum bytes exceeded": true, "maximum messages exceeded": true}

// Wrap returns err prefixed with what and wrapping the sentinel of its
// [Kind], if any.
func Wrap(what string, err error) error {
	switch Classify(err) {
	case NotConnected:
		return fmt.Errorf("%s: %w (%w)", what, ErrNotConnected, err)
	case TopologyMissing:
		return fmt.Errorf("%s: %w: %w", what, ErrTopologyMissing, err)
	case TooLarge:
		return fmt.Errorf("%s: %w: %w", what, ErrPayloadTooLarge, err)
	case QueueFull:
		return fmt.Errorf("%s: %w: %w", what, ErrQueueFull, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// NoResponse reports that a request reached no one who answers: no
// responders, or no acknowledgement from a stream. Either the stream has no
// leader right now or it does not exist.
func NoResponse(err error) bool {
	return errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders)
}

// Transient reports whether err may go away by itself, so that the same
// request may succeed when sent again: no responders or no acknowledgement
// in time (a stream without a leader, or whose leader stepped down), a full
// reconnect buffer, an asynchronous publish not acknowledged in time, or the
// server reporting JetStream temporarily unavailable or no suitable peers
// (a cluster still forming).
func Transient(err error) bool {
	switch {
	case err == nil:
		return false
	case NoResponse(err), errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, jetstream.ErrAsyncPublishTimeout):
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == codeTempUnavailable || apiErr.ErrorCode == codeNoSuitablePeers)
}

// WrongLastSequence reports a failed optimistic-concurrency check (code
// 10071, or 10164 on replicated streams).
func WrongLastSequence(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}
