package pull_test

import (
	"fmt"
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
	if _, err := js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy}); err != nil {
		t.Fatal(err)
	}
	it, err := pull.NewIter(nc, "S", "C", func() int { return size }, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(it.Stop)
	return it
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
