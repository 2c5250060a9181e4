package staterec

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

// Key maps IDs to KV keys one to one, keeping generated IDs as they are.
func TestKey(t *testing.T) {
	cases := map[string]string{
		"01HZX9abc_-":                   "01HZX9abc_-",
		"a:b":                           "a=3Ab",
		"=":                             "=3D",
		"a=3Ab":                         "a=3D3Ab",
		"":                              "=",
		"é":                             "=C3=A9",
		"a b\n":                         "a=20b=0A",
		"x.y*>":                         "x=2Ey=2A=3E",
		"\x00\xff":                      "=00=FF",
		"cron:daily:20":                 "cron=3Adaily=3A20",
		"a=b":                           "a=3Db",
		"a.b":                           "a=2Eb",
		"cron-nightly-20260101T000000Z": "cron-nightly-20260101T000000Z",
	}
	for id, want := range cases {
		if got := Key(id); got != want {
			t.Errorf("Key(%q) = %q; want %q", id, got, want)
		}
	}
	// One to one over every byte, and only key-safe bytes out.
	seen := map[string]string{}
	for c := range 256 {
		for _, id := range []string{string(rune(c)), string([]byte{byte(c)}), "a" + string([]byte{byte(c)})} {
			k := Key(id)
			if prev, ok := seen[k]; ok && prev != id {
				t.Fatalf("Key(%q) = Key(%q) = %q", id, prev, k)
			}
			seen[k] = id
			for i := 0; i < len(k); i++ {
				if !keySafe(k[i]) && k[i] != '=' {
					t.Fatalf("Key(%q) = %q holds byte %#x", id, k, k[i])
				}
			}
		}
	}
	if k := Key(strings.Repeat(":", 10000)); len(k) != 30000 {
		t.Errorf("Key of 10,000 colons is %d bytes", len(k))
	}
}

func stateBucket(t *testing.T) (*Writer, jetstream.KeyValue) {
	t.Helper()
	nc, js := testutil.JetStream(t, testutil.RunServer(t))
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "STATE"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(nc, "STATE", 64, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return w, kv
}

// readState waits until the record of id holds state and returns it.
func readState(t *testing.T, kv jetstream.KeyValue, id, state string) map[string]any {
	t.Helper()
	var rec map[string]any
	testutil.Wait(t, 10*time.Second, "record "+id+" "+state, func() bool {
		e, err := kv.Get(t.Context(), Key(id))
		if err != nil {
			return false
		}
		rec = nil
		return json.Unmarshal(e.Value(), &rec) == nil && rec["state"] == state
	})
	return rec
}

// An enqueue's record is stored only when the task has none: a worker's
// record written first is kept, and that is no write error.
func TestEnqueuedDoesNotOverwrite(t *testing.T) {
	t.Parallel()
	w, kv := stateBucket(t)
	w.Enqueued(Record{ID: "t:1", Type: "email", Priority: "normal"})
	readState(t, kv, "t:1", Pending)
	w.Enqueued(Record{ID: "t:2", Type: "email", Priority: "normal", ScheduledFor: time.Now().Add(time.Hour), Sequence: 9})
	rec := readState(t, kv, "t:2", Scheduled)
	if _, ok := rec["seq"]; ok {
		t.Errorf("a scheduled record keeps a sequence: %v", rec)
	}
	tr := NewTracker(w, 0, map[string]bool{"email": true}, nil)
	tr.Finished(Record{ID: "t:3", Type: "email", Priority: "normal"}, nil, Outcome{State: Succeeded, Took: time.Second}, false)
	readState(t, kv, "t:3", Succeeded)
	w.Enqueued(Record{ID: "t:3", Type: "email", Priority: "normal"})
	select {
	case <-w.js.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("acknowledgements outstanding")
	}
	readState(t, kv, "t:3", Succeeded)
	if n := w.errs.Load(); n != 0 {
		t.Errorf("%d write errors; a refused enqueue record is none", n)
	}
}

// The tracker writes an attempt's running record and its outcome.
func TestTrackerRecords(t *testing.T) {
	t.Parallel()
	w, kv := stateBucket(t)
	tr := NewTracker(w, 0, map[string]bool{"email": true}, nil)
	if !tr.Tracked("email") || tr.Tracked("sms") || (*Tracker)(nil).Tracked("email") {
		t.Error("Tracked wrong")
	}
	rec := Record{ID: "a1", Type: "email", Priority: "high", Attempt: 1, MaxAttempts: 3}
	a := &Attempt{}
	tr.Started(rec, a)
	readState(t, kv, "a1", Running)
	tr.Progress(rec, a, Progress{Done: 1, Total: 2})
	a.Result = []byte(`{"ok":true}`)
	tr.Finished(rec, a, Outcome{State: Succeeded, Took: time.Second}, true)
	got := readState(t, kv, "a1", Succeeded)
	if got["result"] == nil || got["finished_at"] == nil {
		t.Errorf("succeeded record %v", got)
	}
	tr.Finished(Record{ID: "a2", Type: "email", Priority: "high"}, nil, Outcome{State: Retrying, Error: "boom", Delay: time.Minute}, true)
	if got := readState(t, kv, "a2", Retrying); got["error"] != "boom" || got["next_attempt_at"] == nil {
		t.Errorf("retrying record %v", got)
	}
	tr.Finished(Record{ID: "a3", Type: "email", Priority: "high"}, nil, Outcome{State: Dead, Error: "gone"}, false)
	if got := readState(t, kv, "a3", Dead); got["error"] != "gone" {
		t.Errorf("dead record %v", got)
	}
}

// Ready creates the bucket once; a failed attempt is tried again.
func TestTrackerReady(t *testing.T) {
	t.Parallel()
	calls := 0
	boom := errors.New("no permission")
	tr := NewTracker(nil, 0, nil, func(context.Context) error {
		calls++
		if calls == 1 {
			return boom
		}
		return nil
	})
	if err := tr.Ready(t.Context()); err != boom {
		t.Fatalf("first Ready: %v", err)
	}
	for range 3 {
		if err := tr.Ready(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 2 {
		t.Errorf("ensure called %d times; want 2", calls)
	}
}

// A record the server refuses for another reason than an existing record
// is counted as an error.
func TestWriteErrorsCounted(t *testing.T) {
	t.Parallel()
	nc, _ := testutil.JetStream(t, testutil.RunServer(t))
	w, err := NewWriter(nc, "NO_BUCKET", 4, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Write("x", []byte("{}"), true)
	testutil.Wait(t, 15*time.Second, "the error counted", func() bool { return w.errs.Load() == 1 })
	nc.Close()
	w.Write("y", []byte("{}"), false)
	w.Write("z", []byte("{}"), true)
	if n := w.errs.Load(); n != 3 {
		t.Errorf("%d errors after writes on a closed connection; want 3", n)
	}
}
