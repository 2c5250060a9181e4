package streamdefs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func TestRetryTransient(t *testing.T) {
	t.Parallel()
	noPeers := &jetstream.APIError{Code: 500, ErrorCode: jetstream.ErrorCode(10005), Description: "no suitable peers for placement, peer offline"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	calls := 0
	err := RetryTransient(ctx, func() error {
		calls++
		if calls < 3 {
			return noPeers
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("RetryTransient = %v after %d calls, want nil after 3", err, calls)
	}

	calls = 0
	permanent := errors.New("boom")
	if err := RetryTransient(ctx, func() error { calls++; return permanent }); !errors.Is(err, permanent) || calls != 1 {
		t.Fatalf("non-transient error: %v after %d calls, want boom after 1", err, calls)
	}

	short, cancelShort := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancelShort()
	if err := RetryTransient(short, func() error { return noPeers }); !errors.As(err, new(*jetstream.APIError)) {
		t.Fatalf("after the deadline: %v, want the last transient error", err)
	}
}
