package pull_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/testutil"
)

// newIter stores n messages on a fresh server and opens an iterator of
// batch size on a durable consumer of them.
func newIter(t *testing.T, n, size int) *pull.Iter {
	t.Helper()
	_, _, it := newIterOn(t, n, size)
	return it
}

// newIterOn is newIter that also returns the server and the consumer.
func newIterOn(t *testing.T, n, size int) (*testutil.Server, jetstream.Consumer, *pull.Iter) {
	t.Helper()
	s := testutil.RunServer(t)
	nc := testutil.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"}}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := js.Publish(ctx, "s.x", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	cons, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	it, err := pull.NewIter(nc, "S", "C", func() int { return size }, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	return s, cons, it
}

// tryNext waits for TryNext to return a message.
func tryNext(t *testing.T, it *pull.Iter) *pull.Msg {
	t.Helper()
	var m *pull.Msg
	testutil.Wait(t, 10*time.Second, "a buffered message", func() bool {
		m = it.TryNext()
		return m != nil
	})
	return m
}

// Once Next has sent the first pull request, TryNext alone drains the
// consumer: each time the last request brought all its messages and at most
// half a batch is left, taking a message asks for the next batch.
func TestTryNextRefillsWithoutNext(t *testing.T) {
	t.Parallel()
	const n, size = 20, 4
	it := newIter(t, n, size)
	m, err := it.Next(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := []string{string(m.Data())}
	for len(got) < n {
		got = append(got, string(tryNext(t, it).Data()))
	}
	for i, d := range got {
		if d != fmt.Sprint(i) {
			t.Fatalf("message %d is %q: %v", i, d, got)
		}
	}
	if _, err := it.Next(50 * time.Millisecond); err != nats.ErrTimeout {
		t.Fatalf("Next after the last message: %v", err)
	}
}

// Unget puts a message back at the head of the queue; once the iterator
// stopped it refuses, and TryNext gives nothing from a stopped or draining
// iterator.
func TestUngetAndStop(t *testing.T) {
	t.Parallel()
	it := newIter(t, 3, 10)
	if _, err := it.Next(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	m := tryNext(t, it)
	if !it.Unget(m) {
		t.Fatal("Unget refused on a live iterator")
	}
	if again := tryNext(t, it); again != m {
		t.Fatalf("TryNext after Unget gave %q, want %q again", again.Data(), m.Data())
	}
	if !it.Unget(m) {
		t.Fatal("Unget refused on a live iterator")
	}
	it.Drain()
	if q := it.TryNext(); q != nil {
		t.Fatalf("TryNext on a draining iterator gave %q", q.Data())
	}
	it.Stop()
	if it.Unget(m) {
		t.Fatal("Unget accepted by a stopped iterator")
	}
}

// SetDirect's hook gets the messages that arrive at an empty queue, in
// order; the ones it refuses are queued for Next. A message Next returned
// goes before the later ones until the reader passed it on: they are
// queued, TryNext gives none of them, and after Passed they come in order.
func TestDirect(t *testing.T) {
	t.Parallel()
	const n = 6
	it := newIter(t, n, 2)
	var (
		mu    sync.Mutex
		order []string
		calls atomic.Int64
	)
	it.SetDirect(func(m *pull.Msg) bool {
		calls.Add(1)
		if string(m.Data()) == "3" {
			return false // refused: queued
		}
		mu.Lock()
		order = append(order, string(m.Data()))
		mu.Unlock()
		return true
	})
	// Next sends the first request; "0" to "2" go to the hook, and the
	// hook's messages still count for the refills: "0" and "1" answer the
	// first request, whose end asks for "2" and "3"; "3" stays queued until
	// Next takes it, which asks for "4" and "5".
	m, err := it.Next(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Data()) != "3" {
		t.Fatalf("Next gave %q, want the refused message", m.Data())
	}
	// "3" is not passed on yet: "4" and "5" wait behind it.
	testutil.Wait(t, 10*time.Second, "the later messages queued", func() bool { return it.Queued() == 2 })
	if q := it.TryNext(); q != nil {
		t.Fatalf("TryNext gave %q before the reader passed on %q", q.Data(), m.Data())
	}
	it.Passed()
	for _, want := range []string{"4", "5"} {
		if q := it.TryNext(); q == nil || string(q.Data()) != want {
			t.Fatalf("TryNext after Passed gave %v, want %q", q, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"0", "1", "2"}; !slices.Equal(order, want) {
		t.Fatalf("hook got %v, want %v", order, want)
	}
	if c := calls.Load(); c != 4 {
		t.Fatalf("hook called %d times, want once per message that reached an empty queue (4)", c)
	}
}

// Messages taken by the direct hook count for the refills: once Next has
// sent the first request, the hook alone gets every message of the
// consumer, as TryNext alone would.
func TestDirectRefills(t *testing.T) {
	t.Parallel()
	const n, size = 12, 2
	it := newIter(t, n, size)
	var (
		mu  sync.Mutex
		got []string
	)
	it.SetDirect(func(m *pull.Msg) bool {
		mu.Lock()
		got = append(got, string(m.Data()))
		mu.Unlock()
		return true
	})
	// Next sends the first request and returns empty-handed: the hook takes
	// what arrives.
	if m, err := it.Next(time.Millisecond); err == nil {
		t.Fatalf("Next gave %q past the hook", m.Data())
	}
	testutil.Wait(t, 10*time.Second, "every message at the hook", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	})
	for i, d := range got {
		if d != fmt.Sprint(i) {
			t.Fatalf("message %d is %q: %v", i, d, got)
		}
	}
}

// TakeIf takes the head of the queue only when its callback accepts it; a
// refused message stays at the head, and a message Next returned and its
// reader has not passed on goes first.
func TestTakeIf(t *testing.T) {
	t.Parallel()
	it := newIter(t, 3, 10)
	it.SetDirect(func(*pull.Msg) bool { return false })
	if m, err := it.Next(10 * time.Second); err != nil || string(m.Data()) != "0" {
		t.Fatalf("Next = %v, %v: want 0", m, err)
	}
	testutil.Wait(t, 10*time.Second, "the other messages queued", func() bool { return it.Queued() == 2 })
	called := false
	if m := it.TakeIf(func(*pull.Msg) bool { called = true; return true }); m != nil || called {
		t.Fatalf("TakeIf gave %v (callback called %v) before the reader passed on 0", m, called)
	}
	it.Passed()
	if m := it.TakeIf(func(m *pull.Msg) bool { return string(m.Data()) != "1" }); m != nil {
		t.Fatalf("TakeIf gave %q that its callback refused", m.Data())
	}
	var offered string
	m := it.TakeIf(func(m *pull.Msg) bool { offered = string(m.Data()); return true })
	if m == nil || string(m.Data()) != "1" || offered != "1" {
		t.Fatalf("TakeIf gave %v (offered %q), want the refused head 1", m, offered)
	}
	if it.Queued() != 1 {
		t.Fatalf("%d queued after taking 1, want 1", it.Queued())
	}
}
