package debounce_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/debounce"
	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLong bounds every wait: generous for busy machines.
const waitLong = 30 * time.Second

// runs records the runs of a debounced type and counts every task the
// worker finished (checks included).
type runs struct {
	mu       sync.Mutex
	got      map[string][]int // task key → payloads run
	finished atomic.Int64
}

// worker starts a worker with debounce installed that handles taskType.
func (r *runs) worker(t *testing.T, e *testenv.Env, taskType string) {
	t.Helper()
	w := e.Worker(t, framework.WithHooks(framework.Hooks{
		Finished: func(context.Context, *framework.Task, framework.Outcome) { r.finished.Add(1) },
	}))
	if err := debounce.Install(w); err != nil {
		t.Fatal(err)
	}
	framework.Handle(w, taskType, func(_ context.Context, task *framework.Task, v int) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got[task.Key()] = append(r.got[task.Key()], v)
		return nil
	})
	testutil.StartWorker(t, w)
}

// TestDebounceRunsTheLastOnce: bursts of enqueues of two keys run once
// each, with the burst's last payload, once every check has been taken;
// the bucket is left empty; a later burst of a key runs again.
func TestDebounceRunsTheLastOnce(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := &runs{got: map[string][]int{}}
	r.worker(t, e, "doc.index")
	opts := func(key string) debounce.Options {
		return debounce.Options{Key: key, Window: 300 * time.Millisecond, MaxWait: time.Minute}
	}
	for i := range 20 {
		if _, err := debounce.Enqueue(t.Context(), e.Client, "doc.index", i, opts("doc 1")); err != nil {
			t.Fatal(err)
		}
		if i < 5 {
			if _, err := debounce.Enqueue(t.Context(), e.Client, "doc.index", 100+i, opts("doc.2")); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.Wait(t, waitLong, "25 checks and 2 runs finished", func() bool { return r.finished.Load() >= 27 })
	r.mu.Lock()
	if got := r.got["doc 1"]; len(got) != 1 || got[0] != 19 {
		t.Errorf("key ' doc 1 ' ran %v, want once with 19", got)
	}
	if got := r.got["doc.2"]; len(got) != 1 || got[0] != 104 {
		t.Errorf("key doc.2 ran %v, want once with 104", got)
	}
	r.mu.Unlock()
	kv, err := e.JS.KeyValue(t.Context(), streams.MustNames("").DebounceBucket())
	if err != nil {
		t.Fatal(err)
	}
	if keys, err := kv.ListKeys(t.Context()); err == nil {
		for k := range keys.Keys() {
			t.Errorf("record %s left in the bucket", k)
		}
	}
	if _, err := debounce.Enqueue(t.Context(), e.Client, "doc.index", 7, opts("doc 1")); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "the next burst run", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.got["doc 1"]) == 2
	})
	if got := r.got["doc 1"]; got[1] != 7 {
		t.Errorf("the next burst ran %v, want 7", got)
	}
}

// TestDebounceMaxWait: a key enqueued more often than its window never goes
// quiet, and still runs while the enqueues go on: no later than its maximum
// wait.
func TestDebounceMaxWait(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := &runs{got: map[string][]int{}}
	r.worker(t, e, "feed.rebuild")
	o := debounce.Options{Key: "feed", Window: 400 * time.Millisecond, MaxWait: 500 * time.Millisecond}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	ran := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.got["feed"])
	}
	deadline := time.After(waitLong)
	for i := 0; ran() == 0; i++ {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("no run after %d enqueues at 50 ms: the maximum wait did not hold", i)
		}
		if _, err := debounce.Enqueue(t.Context(), e.Client, "feed.rebuild", i, o); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDebounceBadInput: invalid options are refused with a clear error and
// record nothing; a forged check whose key header is not base64url, or a
// record that is not one, is dead-lettered as invalid, and a check without
// a record ends quietly.
func TestDebounceBadInput(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := &runs{got: map[string][]int{}}
	r.worker(t, e, "bad.debounce")
	for _, o := range []debounce.Options{
		{Key: "", Window: time.Second},
		{Key: "a\x01b", Window: time.Second},
		{Key: " padded ", Window: time.Second},
		{Key: "k", Window: time.Millisecond},
		{Key: "k", Window: time.Second, MaxWait: time.Millisecond},
		{Key: "k", Window: time.Second, MaxWait: 24 * time.Hour},
	} {
		if _, err := debounce.Enqueue(t.Context(), e.Client, "bad.debounce", 1, o); !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("Enqueue %+v: %v, want ErrInvalidOption", o, err)
		}
	}
	if _, err := debounce.Enqueue(t.Context(), e.Client, "bad.debounce", func() {}, debounce.Options{Key: "k", Window: time.Second}); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("Enqueue of a payload JSON cannot encode: %v", err)
	}
	names := streams.MustNames("")
	forge := func(id, header string) {
		m := nats.NewMsg(names.TaskSubject(framework.PriorityNormal, "bad.debounce"))
		m.Header.Set("Nats-Msg-Id", id)
		m.Header.Set(framework.HeaderTaskID, id)
		m.Header.Set(debounce.HeaderCheck, header)
		if _, err := e.JS.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	forge("forged-1", "not base64!")
	forge("forged-2", "bm8tcmVjb3Jk") // "no-record": no burst, ends quietly
	kv, err := e.JS.KeyValue(t.Context(), names.DebounceBucket())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "bad.debounce.Z2FyYmFnZQ", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	forge("forged-3", "Z2FyYmFnZQ") // "garbage"
	var recs []dlq.Record
	testutil.Wait(t, waitLong, "two forged checks dead-lettered", func() bool {
		recs, _, err = dlq.New(e.Client).List(t.Context(), dlq.Filter{}, dlq.Page{})
		return err == nil && len(recs) == 2
	})
	for _, rec := range recs {
		if rec.Reason != dlq.ReasonInvalid || (rec.TaskID != "forged-1" && rec.TaskID != "forged-3") {
			t.Errorf("dead letter %s: %s %s", rec.TaskID, rec.Reason, rec.LastError)
		}
	}
	testutil.Wait(t, waitLong, "the forged checks taken", func() bool { return r.finished.Load() >= 3 })
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != 0 {
		t.Errorf("handler ran %v", r.got)
	}
}

// TestDebounceCheckDecides: a check runs the burst only when it is the
// burst's last enqueue's or carries the burst's maximum-wait mark; a check
// of an earlier enqueue, or one marked for another burst, ends without a
// run. The checks here are published by hand while the burst's own check
// is a minute away.
func TestDebounceCheckDecides(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	r := &runs{got: map[string][]int{}}
	r.worker(t, e, "decide.job")
	if _, err := debounce.Enqueue(t.Context(), e.Client, "decide.job", 5,
		debounce.Options{Key: "k", Window: time.Minute, MaxWait: time.Hour}); err != nil {
		t.Fatal(err)
	}
	names := streams.MustNames("")
	kv, err := e.JS.KeyValue(t.Context(), names.DebounceBucket())
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(t.Context(), "decide.job.aw") // "k"
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		First int64 `json:"first"`
	}
	if err := json.Unmarshal(entry.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	check := func(id, capped string) {
		m := nats.NewMsg(names.TaskSubject(framework.PriorityNormal, "decide.job"))
		m.Header.Set("Nats-Msg-Id", id)
		m.Header.Set(framework.HeaderTaskID, id)
		m.Header.Set(debounce.HeaderCheck, "aw")
		if capped != "" {
			m.Header.Set(debounce.HeaderCapped, capped)
		}
		if _, err := e.JS.PublishMsg(t.Context(), m); err != nil {
			t.Fatal(err)
		}
	}
	check("early-1", "")
	check("early-2", strconv.FormatInt(rec.First-1, 10))
	testutil.Wait(t, waitLong, "two checks taken", func() bool { return r.finished.Load() >= 2 })
	r.mu.Lock()
	if len(r.got) != 0 {
		t.Errorf("an earlier check ran the burst: %v", r.got)
	}
	r.mu.Unlock()
	check("capped", strconv.FormatInt(rec.First, 10))
	testutil.Wait(t, waitLong, "the burst run", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.got["k"]) == 1 && r.got["k"][0] == 5
	})
}
