package natserr

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestClassifyAndWrap(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		err       error
		kind      Kind
		sentinel  error
		transient bool
	}{
		{"closed", nats.ErrConnectionClosed, NotConnected, ErrNotConnected, false},
		{"reconnecting, wrapped", fmt.Errorf("publish: %w", nats.ErrConnectionReconnecting), NotConnected, ErrNotConnected, false},
		{"no responders", nats.ErrNoResponders, TopologyMissing, ErrTopologyMissing, true},
		{"no stream response", jetstream.ErrNoStreamResponse, TopologyMissing, ErrTopologyMissing, true},
		{"stream not found", jetstream.ErrStreamNotFound, TopologyMissing, ErrTopologyMissing, false},
		{"no direct get", ErrNoStream, TopologyMissing, ErrTopologyMissing, false},
		{"max payload", nats.ErrMaxPayload, TooLarge, ErrPayloadTooLarge, false},
		{"stream message too large", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamMessageExceedsMaximum}, TooLarge, ErrPayloadTooLarge, false},
		{"stream full (bytes)", &jetstream.APIError{Code: 503, ErrorCode: codeStoreFailed, Description: "maximum bytes exceeded"}, QueueFull, ErrQueueFull, false},
		{"stream full (messages)", &jetstream.APIError{Code: 503, ErrorCode: codeStoreFailed, Description: "maximum messages exceeded"}, QueueFull, ErrQueueFull, false},
		{"other store failure", &jetstream.APIError{Code: 503, ErrorCode: codeStoreFailed, Description: "something else"}, Other, nil, false},
		{"temporarily unavailable", &jetstream.APIError{ErrorCode: codeTempUnavailable}, Other, nil, true},
		{"no suitable peers", &jetstream.APIError{ErrorCode: codeNoSuitablePeers}, Other, nil, true},
		{"timeout", nats.ErrTimeout, Other, nil, true},
		{"deadline", context.DeadlineExceeded, Other, nil, true},
		{"other", errors.New("boom"), Other, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if k := Classify(c.err); k != c.kind {
				t.Errorf("Classify = %d, want %d", k, c.kind)
			}
			if tr := Transient(c.err); tr != c.transient {
				t.Errorf("Transient = %v, want %v", tr, c.transient)
			}
			w := Wrap("op", c.err)
			if !errors.Is(w, c.err) {
				t.Errorf("Wrap lost the cause: %v", w)
			}
			if c.sentinel != nil && !errors.Is(w, c.sentinel) {
				t.Errorf("Wrap = %v, want it to match %v", w, c.sentinel)
			}
		})
	}
	if !WrongLastSequence(&jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}) || WrongLastSequence(errors.New("x")) {
		t.Error("WrongLastSequence")
	}
}
