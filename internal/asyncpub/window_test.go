package asyncpub_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/asyncpub"
	"github.com/jetflow-io/jetflow/testutil"
)

// newStream starts a server with stream S on subjects s.> (a duplicate
// window, so that Nats-Msg-Id deduplicates) and returns a connection.
func newStream(t *testing.T) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	s := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, s)
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}, Duplicates: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return nc, js
}

func open(t *testing.T, nc *nats.Conn, size int, timeout time.Duration) *asyncpub.Window {
	t.Helper()
	w, err := asyncpub.Open(nc, size, timeout, "S")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

// Far more messages than the window: each is stored once, in order, and
// its acknowledgement is the stream's sequence; a duplicate ID comes back
// as a duplicate of the first.
func TestWindowPublishesInOrder(t *testing.T) {
	t.Parallel()
	nc, js := newStream(t)
	w := open(t, nc, 4, time.Minute)
	const n = 1000
	seqs := make(chan uint64, n)
	errc := make(chan error, 1)
	go func() {
		defer close(seqs)
		for i := range n {
			m := &nats.Msg{Subject: "s.a", Data: []byte(strconv.Itoa(i)), Header: nats.Header{jetstream.MsgIDHeader: []string{"id-" + strconv.Itoa(i%(n-1))}}}
			seq, err := w.Publish(t.Context(), m)
			if err != nil {
				errc <- err
				return
			}
			seqs <- seq
		}
	}()
	i := 0
	for seq := range seqs {
		ack, err := w.Wait(t.Context(), seq)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		want := asyncpub.Ack{Stream: "S", Seq: uint64(i + 1)}
		if i == n-1 { // the ID of message 0 again
			want = asyncpub.Ack{Stream: "S", Seq: 1, Duplicate: true}
		}
		if ack != want {
			t.Fatalf("message %d: ack %+v, want %+v", i, ack, want)
		}
		i++
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	info, err := js.Stream(t.Context(), "S")
	if err != nil {
		t.Fatal(err)
	}
	if i != n || info.CachedInfo().State.Msgs != n-1 {
		t.Fatalf("%d acknowledged, %d stored; want %d and %d", i, info.CachedInfo().State.Msgs, n, n-1)
	}
}

// The errors a publish can end with: no stream for the subject, the
// server's refusal, an acknowledgement that never comes (and a late reply
// to it does not settle the message that reuses its slot), a full window
// while ctx ends.
func TestWindowErrors(t *testing.T) {
	t.Parallel()
	nc, _ := newStream(t)
	w := open(t, nc, 1, 300*time.Millisecond)
	ctx := t.Context()

	seq, err := w.Publish(ctx, &nats.Msg{Subject: "nostream"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Wait(ctx, seq); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("no stream: %v, want ErrNoStreamResponse", err)
	}

	m := &nats.Msg{Subject: "s.a", Header: nats.Header{jetstream.ExpectedLastSeqHeader: []string{"99"}}}
	seq, err = w.Publish(ctx, m)
	if err != nil {
		t.Fatal(err)
	}
	var apiErr *jetstream.APIError
	if _, err := w.Wait(ctx, seq); !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Fatalf("wrong last sequence: %v, want the server's APIError", err)
	}
	if _, err := w.Publish(ctx, m); !errors.Is(err, asyncpub.ErrReplySet) {
		t.Fatalf("message published again: %v, want ErrReplySet", err)
	}

	// A listener that takes the message and answers only later.
	replies := make(chan string, 1)
	sub, err := nc.Subscribe("silent", func(m *nats.Msg) { replies <- m.Reply })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	seq, err = w.Publish(ctx, &nats.Msg{Subject: "silent"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Wait(ctx, seq); !errors.Is(err, asyncpub.ErrTimeout) {
		t.Fatalf("no answer: %v, want ErrTimeout", err)
	}
	late := <-replies
	next, err := w.Publish(ctx, &nats.Msg{Subject: "s.b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Publish(late, []byte(`{"stream":"S","seq":12345}`)); err != nil {
		t.Fatal(err)
	}
	if ack, err := w.Wait(ctx, next); err != nil || ack.Seq == 12345 {
		t.Fatalf("after a late reply: %+v, %v; want the message's own acknowledgement", ack, err)
	}

	// The window (of one) is full while a message waits for its answer.
	held, err := w.Publish(ctx, &nats.Msg{Subject: "silent"})
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := w.Publish(short, &nats.Msg{Subject: "s.c"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("full window: %v, want the context's error", err)
	}
	if _, err := w.Wait(short, held); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with an ended context: %v", err)
	}
	<-replies
}

// Closing the connection ends the wait at once, not at the timeout.
func TestWindowConnectionClosed(t *testing.T) {
	t.Parallel()
	nc, _ := newStream(t)
	w := open(t, nc, 8, time.Hour)
	if _, err := nc.Subscribe("silent", func(*nats.Msg) {}); err != nil {
		t.Fatal(err)
	}
	seq, err := w.Publish(t.Context(), &nats.Msg{Subject: "silent"})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	nc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := w.Wait(ctx, seq); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("closed connection: %v, want ErrConnectionClosed", err)
	}
	if _, err := w.Publish(ctx, &nats.Msg{Subject: "s.a"}); !errors.Is(err, nats.ErrConnectionClosed) {
		t.Fatalf("publish on a closed connection: %v", err)
	}
}
