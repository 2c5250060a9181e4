package jsapi_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/testutil"
)

// newStream starts a server with stream S on subjects s.> and returns its
// JetStream context.
func newStream(t *testing.T) jetstream.JetStream {
	t.Helper()
	s := testutil.RunServer(t)
	nc := testutil.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	return js
}

var quiet = slog.New(slog.DiscardHandler)

func TestPublishWithinStores(t *testing.T) {
	t.Parallel()
	js := newStream(t)
	msg := &nats.Msg{Subject: "s.a", Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: []string{"id-1"}}}
	ack, err := jsapi.PublishWithin(context.Background(), js, "S", msg, quiet, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Stream != "S" || ack.Sequence != 1 || ack.Duplicate {
		t.Fatalf("ack = %+v, want S/1, not duplicate", ack)
	}
	ack, err = jsapi.PublishWithin(context.Background(), js, "S", msg, quiet, time.Minute)
	if err != nil || !ack.Duplicate {
		t.Fatalf("second publish: %+v, %v; want a duplicate", ack, err)
	}
}

// A stream that exists but never answers (here: nothing listens on the
// subject, which the stream does not cover) is retried until the limit when
// the context has no deadline, then reported with the context's error.
func TestPublishWithinBoundsRetriesWithoutDeadline(t *testing.T) {
	t.Parallel()
	js := newStream(t)
	msg := &nats.Msg{Subject: "elsewhere", Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: []string{"id-1"}}}
	const limit = 300 * time.Millisecond
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := jsapi.PublishWithin(context.Background(), js, "S", msg, quiet, limit)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("PublishWithin: %v, want the bound's deadline exceeded", err)
		}
		if took := time.Since(start); took < limit {
			t.Fatalf("PublishWithin gave up after %v, before the limit %v", took, limit)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("PublishWithin still retrying 20 s after a limit of 300 ms")
	}
}

// The caller's deadline wins over the limit.
func TestPublishWithinKeepsCallerDeadline(t *testing.T) {
	t.Parallel()
	js := newStream(t)
	msg := &nats.Msg{Subject: "elsewhere", Data: []byte("x"), Header: nats.Header{jetstream.MsgIDHeader: []string{"id-1"}}}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := jsapi.PublishWithin(ctx, js, "S", msg, quiet, time.Hour)
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil {
		t.Fatalf("PublishWithin: %v (ctx %v), want the caller's deadline exceeded", err, ctx.Err())
	}
}

// A stream that does not exist is reported at once, not retried.
func TestPublishWithinMissingStream(t *testing.T) {
	t.Parallel()
	js := newStream(t)
	msg := &nats.Msg{Subject: "elsewhere", Data: []byte("x")}
	_, err := jsapi.PublishWithin(context.Background(), js, "MISSING", msg, quiet, time.Hour)
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("PublishWithin: %v, want ErrNoStreamResponse", err)
	}
}
