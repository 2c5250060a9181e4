package circuit

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

// clusterEnv is a Cluster on an embedded server: task type "a" declared
// dependency "pay"; its consumers c-a-high and c-a-low exist, c-a-missing
// does not. Forced opens are sent on forced.
type clusterEnv struct {
	c      *Cluster
	js     jetstream.JetStream
	kv     jetstream.KeyValue
	forced chan string
}

func newClusterEnv(t *testing.T) *clusterEnv {
	t.Helper()
	s := testutil.RunServer(t)
	_, js := testutil.JetStream(t, s)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"t.>"}, Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"c-a-high", "c-a-low"} {
		if _, err := js.CreateOrUpdateConsumer(ctx, "TASKS", jetstream.ConsumerConfig{Durable: name, FilterSubject: "t." + name}); err != nil {
			t.Fatal(err)
		}
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "BREAKERS", History: 8})
	if err != nil {
		t.Fatal(err)
	}
	e := &clusterEnv{js: js, kv: kv, forced: make(chan string, 16)}
	e.c = &Cluster{
		ID: "w1", KV: kv, JS: js, Stream: "TASKS",
		Types: map[string][]string{"pay": {"a"}, "bad": {"a"}, "ship": {"b"}},
		Consumers: func(tt string) []string {
			return []string{"c-" + tt + "-high", "c-" + tt + "-low", "c-" + tt + "-missing"}
		},
		OpenTimeout: func(dep string) (time.Duration, error) {
			if dep == "bad" {
				return 0, errors.New("invalid dependency name")
			}
			return time.Minute, nil
		},
		ForceOpen: func(dep string) { e.forced <- dep },
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil)), LogKeyDep: "dep", LogKeyErr: "error",
	}
	return e
}

// run runs the cluster until the test ends, once it takes jobs.
func (e *clusterEnv) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { e.c.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	testutil.Wait(t, 10*time.Second, "the cluster running", e.c.active.Load)
}

func (e *clusterEnv) paused(t *testing.T, name string) bool {
	t.Helper()
	cons, err := e.js.Consumer(t.Context(), "TASKS", name)
	if err != nil {
		t.Fatal(err)
	}
	return cons.CachedInfo().Paused
}

func (e *clusterEnv) record(t *testing.T, dep string) (Record, bool) {
	t.Helper()
	entry, err := e.kv.Get(t.Context(), dep)
	if err != nil {
		return Record{}, false
	}
	var rec Record
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec, true
}

// A local breaker that opens publishes its record, naming the consumers it
// pauses, and pauses the consumers of the task types that declared the
// dependency (a consumer that does not exist is skipped); its closing is
// published too. Remote events and events before Run are not published.
func TestClusterPublishesAndPauses(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t)
	now := time.Now()
	e.c.Notify("pay", Event{From: Closed, To: Open, At: now, Until: now.Add(time.Minute), Failures: 3}) // not running: dropped
	e.run(t)
	e.c.Notify("ship", Event{From: Closed, To: Open, At: now, Until: now.Add(time.Minute), Remote: true}) // remote: dropped
	e.c.Notify("pay", Event{From: Closed, To: Open, At: now, Until: now.Add(time.Minute), Failures: 3})
	testutil.Wait(t, 10*time.Second, "both consumers paused", func() bool {
		return e.paused(t, "c-a-high") && e.paused(t, "c-a-low")
	})
	rec, ok := e.record(t, "pay")
	if !ok || rec.State != Open || rec.Worker != "w1" || rec.Failures != 3 || len(rec.Consumers) != 3 ||
		len(rec.TaskTypes) != 1 || !rec.Until.Equal(now.Add(time.Minute).UTC()) {
		t.Fatalf("record %+v", rec)
	}
	e.c.Notify("pay", Event{From: HalfOpen, To: Closed, At: time.Now()})
	testutil.Wait(t, 10*time.Second, "the closed record", func() bool {
		rec, ok := e.record(t, "pay")
		return ok && rec.State == Closed && rec.Until.IsZero() && len(rec.Consumers) == 0
	})
	st, err := e.kv.Status(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Values() != 2 {
		t.Errorf("bucket holds %d values; want 2 (open, closed): a dropped event was published", st.Values())
	}
	if rec, ok := e.record(t, "ship"); ok {
		t.Errorf("a remote event was published: %+v", rec)
	}
}

// Another worker's open record opens the local breaker and pauses the
// consumers it did not pause. Records that are not another worker's
// current open report, or cannot be read, change nothing.
func TestClusterFollowsRemoteOpen(t *testing.T) {
	t.Parallel()
	e := newClusterEnv(t)
	e.run(t)
	now := time.Now()
	put := func(key string, v any) {
		t.Helper()
		var data []byte
		switch v := v.(type) {
		case string:
			data = []byte(v)
		default:
			var err error
			if data, err = json.Marshal(v); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.kv.Put(t.Context(), key, data); err != nil {
			t.Fatal(err)
		}
	}
	open := Record{Dependency: "pay", State: Open, Since: now, Until: now.Add(30 * time.Second), Worker: "w2"}
	mine, closed, past, noSince, far := open, open, open, open, open
	mine.Worker = "w1"
	closed.State = Closed
	past.Until = now.Add(-time.Second)
	noSince.Since = time.Time{}
	far.Since = now.Add(time.Hour)
	put("pay", "{not json")
	put("pay", `{"state":"exploded"}`)
	put("pay", mine)
	put("pay", closed)
	put("pay", past)
	put("pay", noSince)
	put("pay", far)
	put("bad", open)
	if err := e.kv.Delete(t.Context(), "pay"); err != nil {
		t.Fatal(err)
	}
	theirs := open
	theirs.Consumers = []string{"c-a-high"}
	put("pay", theirs)
	// A last report of another dependency: once it is followed, every
	// record before it was handled (the watcher delivers them in order).
	ship := open
	ship.Dependency = "ship"
	put("ship", ship)
	var got []string
	for len(got) < 2 {
		select {
		case dep := <-e.forced:
			got = append(got, dep)
		case <-time.After(10 * time.Second):
			t.Fatalf("forced open %v; want [pay ship]", got)
		}
	}
	if got[0] != "pay" || got[1] != "ship" {
		t.Fatalf("forced open %v; want [pay ship]: an ignorable record was followed", got)
	}
	testutil.Wait(t, 10*time.Second, "c-a-low paused", func() bool { return e.paused(t, "c-a-low") })
	if e.paused(t, "c-a-high") {
		t.Error("c-a-high, paused by the reporting worker, paused again")
	}
}
