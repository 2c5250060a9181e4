package fetch_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/testutil"
)

// The fetcher offers the stored messages one at a time, in order, each as
// a task of the live iterator's feed, and records its polls.
func TestOffersInOrder(t *testing.T) {
	t.Parallel()
	const n = 40
	s := newSide(t, numbered(n), 8, time.Minute)
	s.auto = true
	stop := s.run(time.Minute)
	it := recv(t, s.opened, "iterator")
	for i := range n {
		p := recv(t, s.offered, "offer")
		if p.data() != numbered(n)[i] {
			t.Fatalf("offer %d is %q", i, p.data())
		}
		if p.feed == nil || p.feed.Iter() != it {
			t.Fatalf("task %s is not of the live iterator's feed", p.data())
		}
	}
	stop()
	// The polls were recorded for the stall watchdog, and a stopped loop
	// waits for no slot.
	if s.loop.LastPoll().IsZero() || s.loop.Busy() {
		t.Fatalf("loop record: last poll %v, busy %v", s.loop.LastPoll(), s.loop.Busy())
	}
	if len(s.handedBack) != 0 || len(s.buffered) != 0 {
		t.Fatalf("dispatched tasks handed back: %d, %d", len(s.handedBack), len(s.buffered))
	}
}

// A task that waits half the ack wait for a slot starves the buffer behind
// it: the fetcher drains the buffer into the waiting tasks (no feed: its
// iterator is done), waits until they were all dispatched, busy for the
// stall watchdog, and only then opens a new iterator.
func TestStarvationRescue(t *testing.T) {
	t.Parallel()
	const n = 5
	s := newSide(t, numbered(n), 10, time.Minute)
	const ackWait = time.Second // the fetcher's: starving after 500 ms
	stop := s.run(ackWait)
	recv(t, s.opened, "iterator")
	start := time.Now()
	held := recv(t, s.offered, "offer")
	if held.data() != "0" || held.feed == nil {
		t.Fatalf("first offer %q (feed %v)", held.data(), held.feed)
	}
	rescued := []*task{held}
	for i := 1; i < n; i++ {
		p := recv(t, s.offered, "rescued offer")
		if p.data() != numbered(n)[i] || p.feed != nil {
			t.Fatalf("rescued offer %d is %q (feed %v)", i, p.data(), p.feed)
		}
		rescued = append(rescued, p)
	}
	if waited := time.Since(start); waited < ackWait/2-50*time.Millisecond {
		t.Fatalf("rescued after %v, before half the ack wait", waited)
	}
	select {
	case <-s.opened:
		t.Fatal("a new iterator before the rescued tasks were dispatched")
	default:
	}
	// The rescue logs once its buffer was drained. Every task but the
	// last rescued one gets a slot: the fetcher still waits for that one.
	// (Nothing signals that a fetcher keeps waiting: a new iterator would
	// come at once, so a second without one tells.)
	for {
		if msg := recv(t, s.logged, "rescue log"); strings.Contains(msg, "starved") {
			break
		}
	}
	if !s.loop.Busy() {
		t.Fatal("a rescuing loop is not busy: the stall watchdog would count its wait")
	}
	for _, p := range rescued[:n-1] {
		s.dispatch(p)
	}
	select {
	case <-s.opened:
		t.Fatal("a new iterator while a rescued task waits")
	case <-time.After(time.Second):
	}
	for _, p := range rescued {
		_ = p.msg.Ack()
	}
	s.dispatch(rescued[n-1])
	recv(t, s.opened, "iterator after the rescue")
	stop()
	if len(s.handedBack) != 0 {
		t.Fatalf("%d rescued tasks handed back", len(s.handedBack))
	}
}

// Stopping hands back the task the fetcher holds and the messages still
// in its buffer, then closes the iterator.
func TestStopHandsBack(t *testing.T) {
	t.Parallel()
	const n = 5
	s := newSide(t, numbered(n), 10, time.Minute)
	stop := s.run(time.Hour)
	it := recv(t, s.opened, "iterator")
	held := recv(t, s.offered, "offer")
	// Every message is received: the held one, the others in the buffer.
	// (The consumer counts a message delivered before the server writes it
	// to the connection, so its NumAckPending does not say so.)
	testutil.Wait(t, bound, "all messages received", func() bool { return it.Queued() == n-1 })
	stop()
	if back := recv(t, s.handedBack, "hand-back"); back != held {
		t.Fatalf("handed back %q, want the held task", back.data())
	}
	// The held task, handed back first, may be redelivered to the pull
	// request before the subscription's drain ends: the drain hands it
	// back again, as it should. The others come back once each, in order.
	var got []string
	for len(s.buffered) > 0 {
		if m := <-s.buffered; string(m.Data()) != held.data() {
			got = append(got, string(m.Data()))
		}
	}
	if want := numbered(n)[1:]; !slices.Equal(got, want) {
		t.Fatalf("buffered messages handed back %q, want %q", got, want)
	}
	if len(s.offered) != 0 {
		t.Fatalf("%d tasks offered after the held one", len(s.offered))
	}
}

// An iterator that fails (its consumer deleted) is retried after a
// backoff, with the consumer re-ensured first; an iterator that cannot be
// opened likewise.
func TestResumesAfterFailure(t *testing.T) {
	t.Parallel()
	s := newSide(t, []string{"before"}, 4, time.Minute)
	s.auto = true
	s.failOpen.Store(1)
	s.run(time.Minute)
	recv(t, s.ensured, "re-ensure after a failed open")
	recv(t, s.opened, "iterator")
	if p := recv(t, s.offered, "offer"); p.data() != "before" {
		t.Fatalf("offered %q", p.data())
	}
	if err := s.js.DeleteConsumer(t.Context(), "S", "C"); err != nil {
		t.Fatal(err)
	}
	recv(t, s.ensured, "re-ensure after the consumer was deleted")
	recv(t, s.opened, "new iterator")
	s.publish("after")
	for {
		if p := recv(t, s.offered, "offer after the re-ensure"); p.data() == "after" {
			break
		}
	}
}
