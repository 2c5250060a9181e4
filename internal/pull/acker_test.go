package pull_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/testutil"
)

// fetchAll stores n messages on a fresh server and fetches them all with
// an iterator (newIterOn); it returns them with a second connection, for
// the acker, and the consumer.
func fetchAll(t *testing.T, n int) (*nats.Conn, jetstream.Consumer, []*pull.Msg) {
	t.Helper()
	s, cons, it := newIterOn(t, n, n)
	msgs := make([]*pull.Msg, 0, n)
	for len(msgs) < n {
		m, err := it.Next(10 * time.Second)
		if err != nil {
			t.Fatalf("message %d: %v", len(msgs), err)
		}
		msgs = append(msgs, m.(*pull.Msg))
	}
	return testutil.Connect(t, s), cons, msgs
}

func seqOf(t *testing.T, m *pull.Msg) uint64 {
	t.Helper()
	d, err := m.Delivery()
	if err != nil {
		t.Fatal(err)
	}
	return d.StreamSeq
}

// Acks queued from many goroutines are all on the connection when Close
// returns, and reach the server; a queued ack marks its message acked.
func TestAckerDeliversEveryQueuedAck(t *testing.T) {
	t.Parallel()
	const n, goroutines = 300, 16
	nc, cons, msgs := fetchAll(t, n)
	a := pull.NewAcker(nc, func(i int, err error) { t.Errorf("ack %d refused: %v", i, err) })
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := g; i < n; i += goroutines {
				if err := a.Ack(msgs[i], seqOf(t, msgs[i]), i); err != nil {
					t.Errorf("Ack %d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	a.Close()
	if out := nc.Stats().OutMsgs; out != n {
		t.Errorf("%d acks published when Close returned, want %d", out, n)
	}
	if err := msgs[0].Ack(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Errorf("Ack of a message the acker acked: %v, want ErrMsgAlreadyAckd", err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, 10*time.Second, "every ack on the server", func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.NumAckPending == 0 && info.AckFloor.Stream == n
	})
}

// After Close an ack is published by its caller.
func TestAckerAcksItselfAfterClose(t *testing.T) {
	t.Parallel()
	nc, cons, msgs := fetchAll(t, 2)
	a := pull.NewAcker[int](nc, nil)
	a.Close()
	a.Close() // twice is fine
	for i, m := range msgs {
		if err := a.Ack(m, seqOf(t, m), i); err != nil {
			t.Fatalf("Ack after Close: %v", err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, 10*time.Second, "the acks on the server", func() bool {
		info, err := cons.Info(t.Context())
		return err == nil && info.NumAckPending == 0
	})
}

// A closed connection: the ack queued first is reported to the callback,
// and every later Ack fails at once, leaving its message unacknowledged.
func TestAckerReportsRefusedAcks(t *testing.T) {
	t.Parallel()
	nc, _, msgs := fetchAll(t, 3)
	refused := make(chan int, 3)
	a := pull.NewAcker(nc, func(i int, err error) {
		if !errors.Is(err, nats.ErrConnectionClosed) {
			t.Errorf("ack %d refused with %v, want ErrConnectionClosed", i, err)
		}
		refused <- i
	})
	defer a.Close()
	nc.Close()
	if err := a.Ack(msgs[0], seqOf(t, msgs[0]), 0); err != nil {
		t.Fatalf("first Ack after the close: %v (it is queued)", err)
	}
	select {
	case i := <-refused:
		if i != 0 {
			t.Fatalf("refused ack %d, want 0", i)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the refused ack was not reported")
	}
	for i := 1; i < len(msgs); i++ {
		if err := a.Ack(msgs[i], seqOf(t, msgs[i]), i); !errors.Is(err, nats.ErrConnectionClosed) {
			t.Fatalf("Ack %d on a connection that refused one: %v, want ErrConnectionClosed", i, err)
		}
		if err := msgs[i].Ack(); errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			t.Fatalf("message %d marked acked though its ack failed", i)
		}
	}
}
