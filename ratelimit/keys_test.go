package ratelimit_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestRateLimitPerKey: a per-key limit holds for each key across two
// workers (a key's n tasks cannot all start before (n-1) emission
// intervals), and it is each key's own: a quiet key's task starts while a
// busy key's backlog still waits, which one limit shared by the keys would
// not let happen. Tasks without a key are not limited, and waiting spends
// no attempt. The inspector lists each key's limit.
func TestRateLimitPerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const busy = 30
	lim := ratelimit.Limit{Limit: 5, Interval: time.Second}
	var (
		mu          sync.Mutex
		starts      []time.Time // the busy key's
		busyAtQuiet = -1        // busy tasks started when the quiet one did
		attempts    = map[int]bool{}
		done        = make(chan struct{}, 2*busy)
	)
	for range 2 {
		w := e.worker(t)
		w.HandleFunc("keyed.job", func(_ context.Context, task *framework.Task) error {
			mu.Lock()
			switch task.Key() {
			case "busy":
				starts = append(starts, time.Now())
			case "quiet one":
				busyAtQuiet = len(starts)
			}
			attempts[task.Attempt] = true
			mu.Unlock()
			done <- struct{}{}
			return nil
		}, ratelimit.WithKeyLimit(lim))
		startWorker(t, w)
	}
	begin := time.Now()
	for i := range busy {
		e.Enqueue(t, "keyed.job", i, framework.WithKey("busy"))
	}
	e.Enqueue(t, "keyed.job", 0, framework.WithKey("quiet one"))
	for i := range 10 {
		e.Enqueue(t, "keyed.job", i) // no key
	}
	for i := range busy + 11 {
		select {
		case <-done:
		case <-time.After(waitLong):
			t.Fatalf("%d of %d tasks ran", i, busy+11)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if min := time.Duration(busy-1) * lim.Interval / time.Duration(lim.Limit); starts[busy-1].Sub(begin) < min {
		t.Errorf("the busy key's %d tasks started within %v of the first enqueue, its limit allows no less than %v", busy, starts[busy-1].Sub(begin), min)
	}
	if busyAtQuiet < 0 || busyAtQuiet > busy/2 {
		t.Errorf("the quiet key's task started after %d of the busy key's %d: it waited behind another key's limit", busyAtQuiet, busy)
	}
	if len(attempts) != 1 || !attempts[1] {
		t.Errorf("attempts seen %v, want only 1: waiting for a permit must not spend attempts", attempts)
	}
	infos, err := inspect.New(e.Client).RateLimits(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]bool{}
	for _, in := range infos {
		keys[in.Key] = true
		if in.Key != "" && (in.Limit.Limit != 5 || in.Name == "") {
			t.Errorf("per-key limit %+v", in)
		}
	}
	if !keys["busy"] || !keys["quiet one"] || len(keys) != 2 {
		t.Errorf("limits listed for keys %v, want busy and quiet one", keys)
	}
}

// TestRateLimitPerKeyHostileKey: a task whose key header fails validation
// (control characters, from the wire) is dead-lettered as corrupt, not run
// outside its key's limit, and the other tasks run.
func TestRateLimitPerKeyHostileKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ran := make(chan string, 4)
	w := e.worker(t)
	w.HandleFunc("keyed.hostile", func(_ context.Context, task *framework.Task) error {
		ran <- task.ID
		return nil
	}, ratelimit.WithKeyLimit(ratelimit.Limit{Limit: 100}))
	startWorker(t, w)
	names := streams.MustNames("")
	msg := nats.NewMsg(names.TaskSubject(framework.PriorityNormal, "keyed.hostile"))
	msg.Header.Set(framework.HeaderKey, "bad\x01key")
	msg.Header.Set("Nats-Msg-Id", "hostile-key")
	msg.Header.Set(framework.HeaderTaskID, "hostile-key")
	msg.Data = []byte("1")
	if _, err := e.JS.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	good := e.Enqueue(t, "keyed.hostile", 1, framework.WithKey("fine"))
	select {
	case id := <-ran:
		if id != good.ID {
			t.Fatalf("task %s ran, want only %s", id, good.ID)
		}
	case <-time.After(waitLong):
		t.Fatal("the task with a valid key never ran")
	}
	var recs []dlq.Record
	testutil.Wait(t, waitLong, "the task dead-lettered", func() bool {
		var err error
		recs, _, err = dlq.New(e.Client).List(t.Context(), dlq.Filter{}, dlq.Page{})
		return err == nil && len(recs) == 1
	})
	if r := recs[0]; r.TaskID != "hostile-key" || r.Reason != dlq.ReasonInvalid || !strings.Contains(r.LastError, framework.HeaderKey) {
		t.Errorf("dead letter %+v", r)
	}
}
