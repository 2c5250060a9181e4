package staterec

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

// waitBucket starts a server and returns its connection and a state
// bucket.
func waitBucket(t *testing.T) (*nats.Conn, jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "STATE"})
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, kv
}

// putState writes a record of id in state.
func putState(t *testing.T, kv jetstream.KeyValue, id, state string) uint64 {
	t.Helper()
	rec := Record{ID: id, State: state, Priority: "normal"}
	rev, err := kv.Put(t.Context(), Key(id), rec.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// seenLog is a seen function for Wait that decodes the states it is
// handed, in order; a value that is not JSON is not ok.
type seenLog struct {
	mu     sync.Mutex
	states []string
	revs   []uint64
}

func (l *seenLog) seen(data []byte, rev uint64) (final, ok bool) {
	var r struct{ State string }
	if json.Unmarshal(data, &r) != nil {
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states, l.revs = append(l.states, r.State), append(l.revs, rev)
	return Final(r.State), true
}

func (l *seenLog) got() ([]string, []uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.states), slices.Clone(l.revs)
}

// A record already final ends the wait at once.
func TestWaitFinalAlready(t *testing.T) {
	_, _, kv := waitBucket(t)
	rev := putState(t, kv, "a:1", Succeeded)
	var l seenLog
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := Wait(ctx, kv, Key("a:1"), nil, l.seen); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if states, revs := l.got(); !slices.Equal(states, []string{Succeeded}) || revs[0] != rev {
		t.Fatalf("seen %v at %v; want [succeeded] at %d", states, revs, rev)
	}
}

// Records written later are seen in order, until the final one.
func TestWaitFollowsRecords(t *testing.T) {
	_, _, kv := waitBucket(t)
	putState(t, kv, "t", Pending)
	var l seenLog
	done := make(chan error, 1)
	go func() { done <- Wait(t.Context(), kv, "t", nil, l.seen) }()
	testutil.Wait(t, 10*time.Second, "the pending record seen", func() bool { s, _ := l.got(); return len(s) == 1 })
	putState(t, kv, "other", Dead) // another key: not seen
	// The bucket keeps one value a key: a record replaced before the watch
	// delivered it is never seen. Wait for each one.
	for i, state := range []string{Running, Retrying} {
		putState(t, kv, "t", state)
		testutil.Wait(t, 10*time.Second, "the "+state+" record seen", func() bool { s, _ := l.got(); return len(s) == i+2 })
	}
	putState(t, kv, "t", Dead)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the final record")
	}
	if s, _ := l.got(); !slices.Equal(s, []string{Pending, Running, Retrying, Dead}) {
		t.Fatalf("seen %v", s)
	}
}

// When ctx ends first, Wait returns ctx's error, whatever it saw.
func TestWaitContextEnds(t *testing.T) {
	_, _, kv := waitBucket(t)
	var l seenLog
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := Wait(ctx, kv, "none", nil, l.seen); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait without a record: %v; want the deadline", err)
	}
	if s, _ := l.got(); len(s) != 0 {
		t.Fatalf("seen %v without a record", s)
	}
	putState(t, kv, "r", Running)
	ctx, cancel = context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	if err := Wait(ctx, kv, "r", nil, l.seen); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on a running task: %v; want the deadline", err)
	}
	if s, _ := l.got(); !slices.Equal(s, []string{Running}) {
		t.Fatalf("seen %v", s)
	}
}

// A value seen rejects ends the wait with its revision; a deleted key is
// not a value.
func TestWaitBadRecord(t *testing.T) {
	_, _, kv := waitBucket(t)
	putState(t, kv, "b", Running)
	if err := kv.Delete(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(t.Context(), "b", []byte("not json"))
	if err != nil {
		t.Fatal(err)
	}
	var l seenLog
	err = Wait(t.Context(), kv, "b", nil, l.seen)
	var bad *BadRecordError
	if !errors.As(err, &bad) || bad.Revision != rev {
		t.Fatalf("Wait: %v; want a bad record at revision %d", err, rev)
	}
	if s, _ := l.got(); len(s) != 0 {
		t.Fatalf("seen %v; the deleted record's value should not be handed over", s)
	}
}

// A reconnection starts a new watch, which hands the current record over
// again.
func TestWaitRewatchesOnReconnect(t *testing.T) {
	_, _, kv := waitBucket(t)
	rev := putState(t, kv, "r", Running)
	var l seenLog
	reconnected := make(chan nats.Status)
	done := make(chan error, 1)
	go func() { done <- Wait(t.Context(), kv, "r", reconnected, l.seen) }()
	testutil.Wait(t, 10*time.Second, "the running record seen", func() bool { s, _ := l.got(); return len(s) == 1 })
	reconnected <- nats.CONNECTED
	testutil.Wait(t, 10*time.Second, "the running record seen again", func() bool { s, _ := l.got(); return len(s) == 2 })
	putState(t, kv, "r", Succeeded)
	if err := <-done; err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if s, revs := l.got(); !slices.Equal(s, []string{Running, Running, Succeeded}) || revs[0] != rev || revs[1] != rev {
		t.Fatalf("seen %v at %v; want running twice at %d, then succeeded", s, revs, rev)
	}
}

// A watch that cannot start returns a StartError; one whose connection
// closes returns ErrWatchEnded.
func TestWaitWatchErrors(t *testing.T) {
	nc, _, kv := waitBucket(t)
	putState(t, kv, "c", Running)
	var l seenLog
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Wait(ctx, kv, "c", nil, l.seen) }()
	// The running record seen: the watch is up.
	testutil.Wait(t, 10*time.Second, "the running record seen", func() bool { s, _ := l.got(); return len(s) == 1 })
	nc.Close()
	if err := <-done; !errors.Is(err, ErrWatchEnded) {
		t.Fatalf("Wait after the connection closed: %v; want ErrWatchEnded", err)
	}
	err := Wait(ctx, kv, "c", nil, l.seen)
	var se *StartError
	if !errors.As(err, &se) || se.Err == nil || se.Error() != se.Err.Error() {
		t.Fatalf("Wait on a closed connection: %v; want a StartError", err)
	}
}
