package taskstate

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// waitResult is what a Wait returned.
type waitResult struct {
	rec *staterec.Record
	err error
}

// goWait runs Wait in a goroutine.
func goWait(ctx context.Context, ts *Tasks, id string) <-chan waitResult {
	ch := make(chan waitResult, 1)
	go func() {
		rec, err := ts.Wait(ctx, id)
		ch <- waitResult{rec, err}
	}()
	return ch
}

// Wait creates the state bucket, follows a task's records and returns its
// final one, whatever its state.
func TestWaitFollowsToTheFinalRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := goWait(ctx, e.tasks, "job:1")
	var kv jetstream.KeyValue
	testutil.Wait(t, 10*time.Second, "the state bucket created", func() bool {
		var err error
		kv, err = e.JS.KeyValue(ctx, e.names.StateBucket())
		return err == nil
	})
	put(t, kv, staterec.Record{ID: "job:1", Priority: "normal", State: staterec.Running, Attempt: 1})
	rev := put(t, kv, staterec.Record{ID: "job:1", Priority: "low", State: staterec.Dead, Attempt: 3, Error: "boom"})
	r := testutil.Recv(t, done, 20*time.Second, "the wait's end")
	if r.err != nil || r.rec.State != staterec.Dead || r.rec.Attempt != 3 || r.rec.Error != "boom" || r.rec.Revision != rev || r.rec.Priority != "low" {
		t.Fatalf("Wait = %+v, %v", r.rec, r.err)
	}
	// Already final: at once.
	rec, err := e.tasks.Wait(ctx, "job:1")
	if err != nil || rec.State != staterec.Dead {
		t.Fatalf("second Wait = %+v, %v", rec, err)
	}
}

// When ctx ends first, Wait says whether it saw a record.
func TestWaitContextEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := e.bucket(t)
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	rec, err := e.tasks.Wait(ctx, "unknown")
	if rec != nil || !errors.Is(err, ErrNotFound) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Awaited") {
		t.Fatalf("Wait without a record = %+v, %v", rec, err)
	}
	put(t, kv, staterec.Record{ID: "busy", Priority: "normal", State: staterec.Retrying, Attempt: 2})
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	rec, err = e.tasks.Wait(ctx, "busy")
	if rec == nil || rec.State != staterec.Retrying || errors.Is(err, ErrNotFound) || !errors.Is(err, context.DeadlineExceeded) ||
		!strings.Contains(err.Error(), "still retrying (attempt 2)") {
		t.Fatalf("Wait on a retrying task = %+v, %v", rec, err)
	}
}

// A value that is not a record of the task ends the wait with an error.
func TestWaitBadRecords(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	kv := e.bucket(t)
	for id, data := range map[string]string{
		"notjson":  `{`,
		"otherid":  `{"id":"someone","state":"succeeded"}`,
		"badstate": `{"id":"badstate","state":"finished"}`,
		"badprio":  `{"id":"badprio","state":"succeeded","priority":"urgent"}`,
	} {
		rev, err := kv.Put(t.Context(), staterec.Key(id), []byte(data))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := e.tasks.Wait(t.Context(), id)
		var bad *staterec.BadRecordError
		if rec != nil || err == nil || !strings.Contains(err.Error(), "bad record at revision") || errors.As(err, &bad) {
			t.Errorf("Wait(%s) = %+v, %v; want a bad record at %d, in words", id, rec, err, rev)
		}
	}
	if _, err := e.tasks.Wait(t.Context(), "not valid"); !errors.Is(err, streams.ErrInvalidID) {
		t.Errorf("Wait of an invalid ID: %v", err)
	}
}

// A bucket that cannot be created, or a closed connection, is an error
// that says so.
func TestWaitErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	boom := errors.New("no room")
	failing := New(e.Conn, e.JS, e.names, func(context.Context) error { return boom })
	if _, err := failing.Wait(t.Context(), "x"); !errors.Is(err, boom) || !strings.Contains(err.Error(), "could not be created") {
		t.Errorf("Wait with a failing ensure: %v", err)
	}
	none := New(e.Conn, e.JS, e.names, nil)
	if _, err := none.Wait(t.Context(), "x"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("Wait without ensure or bucket: %v", err)
	}

	kv := e.bucket(t)
	put(t, kv, staterec.Record{ID: "r", Priority: "normal", State: staterec.Running})
	nc := e.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ts := New(nc, js, e.names, nil)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	done := goWait(ctx, ts, "r")
	// The wait is up once its watch's consumer exists.
	testutil.Wait(t, 10*time.Second, "the watch started", func() bool {
		s, err := e.JS.Stream(ctx, "KV_"+e.names.StateBucket())
		return err == nil && s.CachedInfo().State.Consumers > 0
	})
	nc.Close()
	r := testutil.Recv(t, done, 20*time.Second, "the wait's end")
	// The consumer exists before the watch's start returns to the client:
	// the close may end the start (no record seen) or the running watch
	// (with the record it read first).
	ended := strings.Contains(fmt.Sprint(r.err), "the watch ended")
	if !errors.Is(r.err, natserr.ErrNotConnected) || (ended && (r.rec == nil || r.rec.State != staterec.Running)) || (!ended && r.rec != nil) {
		t.Fatalf("Wait after the connection closed = %+v, %v", r.rec, r.err)
	}
	if _, err := ts.Wait(t.Context(), "r"); !errors.Is(err, natserr.ErrNotConnected) {
		t.Fatalf("Wait on a closed connection: %v", err)
	}
}
