package breaker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestBreakerForgedOpenUntilIsBounded writes a breaker record, as anyone
// allowed to write the bucket could, that says the dependency is open until
// the year 9999: the worker opens its breaker and pauses the dependency's
// consumers, but no longer than its own open timeout.
func TestBreakerForgedOpenUntilIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dep = "ledger"
	// Long enough that the pause cannot end before the test looks at it.
	settings := breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 10 * time.Minute}
	w := e.worker(t, []breaker.Option{breaker.WithSettings(dep, settings)})
	w.HandleFunc("acct.refund", func(context.Context, *framework.Task) error { return nil },
		breaker.WithDependencies(dep))
	startWorker(t, w)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	kv, err := e.JS.KeyValue(ctx, streams.MustNames("").BreakerBucket())
	if err != nil {
		t.Fatal(err)
	}
	putOpen(t, ctx, kv, dep, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	names := streams.MustNames("")
	c, err := e.JS.Consumer(ctx, names.TaskStream(), names.ConsumerName("acct.refund", framework.PriorityNormal))
	if err != nil {
		t.Fatal(err)
	}
	var remaining time.Duration
	testutil.Wait(t, time.Minute, "the refund consumer paused", func() bool {
		ci, err := c.Info(ctx)
		if err != nil || !ci.Paused {
			return false
		}
		remaining = ci.PauseRemaining
		return true
	})
	if remaining > settings.OpenTimeout {
		t.Fatalf("consumer paused for %v by a forged record, want at most the open timeout (%v)", remaining, settings.OpenTimeout)
	}
}

// TestBreakerForgedRecordsOfUnknownDependencies fills the breaker bucket with
// open records of dependencies no worker uses, as anyone allowed to write
// it could: the worker creates a bounded number of breakers for them, and
// still opens the breaker of a dependency it declared.
func TestBreakerForgedRecordsOfUnknownDependencies(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dep = "ledger"
	w := e.worker(t, []breaker.Option{breaker.WithSettings(dep, breaker.Settings{OpenTimeout: 10 * time.Minute})})
	w.HandleFunc("acct.refund", func(context.Context, *framework.Task) error { return nil },
		breaker.WithDependencies(dep))
	startWorker(t, w)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	kv, err := e.JS.KeyValue(ctx, streams.MustNames("").BreakerBucket())
	if err != nil {
		t.Fatal(err)
	}
	put := func(name string) { putOpen(t, ctx, kv, name, time.Now().Add(time.Hour)) }
	const forged = 300
	for i := range forged {
		put(fmt.Sprintf("forged-%04d", i))
	}
	put(dep) // read after the others: the bucket's watcher delivers in order
	testutil.Wait(t, time.Minute, "the declared breaker opened", func() bool {
		in, _ := breaker.Of(w).State(dep)
		return in.State == breaker.StateOpen && in.Remote
	})
	// 256 breakers at most for reports of unknown dependencies, and the
	// declared one.
	if n := len(breaker.Of(w).States()); n > 256+1 {
		t.Fatalf("%d breakers after %d forged records, want at most %d", n, forged, 256+1)
	}
}

// TestBreakerForgedOpenedLongAgoIsIgnored writes records saying that a
// dependency's breaker opened an hour ago, and another's opens in a year,
// both open until the year 9999, as anyone allowed to write the bucket
// could. Every worker that starts reads them first (the watcher delivers
// the latest record of each key). By the worker's own open timeout (10
// minutes) the first open period ended long ago, and the second begins
// too far ahead of the worker's clock to be another worker's: the breakers
// stay closed and the consumers run. A current record of a third
// dependency, written after them, opens its breaker and pauses its
// consumers: the worker read all three.
func TestBreakerForgedOpenedLongAgoIsIgnored(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	forged := map[string]time.Time{ // dependency → the forged record's since
		"ledger": time.Now().Add(-time.Hour),
		"fx":     time.Now().AddDate(1, 0, 0),
	}
	const current = "mailer"
	settings := breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 10 * time.Minute}
	bo := []breaker.Option{breaker.WithSettings(current, settings)}
	for dep := range forged {
		bo = append(bo, breaker.WithSettings(dep, settings))
	}
	w := e.worker(t, bo)
	noop := func(context.Context, *framework.Task) error { return nil }
	for dep := range forged {
		w.HandleFunc("acct."+dep, noop, breaker.WithDependencies(dep))
	}
	w.HandleFunc("mail.send", noop, breaker.WithDependencies(current))
	startWorker(t, w)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	names := streams.MustNames("")
	kv, err := e.JS.KeyValue(ctx, names.BreakerBucket())
	if err != nil {
		t.Fatal(err)
	}
	for dep, since := range forged {
		putOpenSince(t, ctx, kv, dep, since, time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	}
	putOpen(t, ctx, kv, current, time.Now().Add(time.Hour))
	paused := func(taskType string) bool {
		ci, err := e.JS.Consumer(ctx, names.TaskStream(), names.ConsumerName(taskType, framework.PriorityNormal))
		if err != nil {
			t.Fatal(err)
		}
		return ci.CachedInfo().Paused
	}
	testutil.Wait(t, time.Minute, "the current report's consumer paused", func() bool { return paused("mail.send") })
	for dep, since := range forged {
		if in, _ := breaker.Of(w).State(dep); in.State != breaker.StateClosed {
			t.Errorf("breaker %s is %v after a record of an open period since %v, want closed", dep, in.State, since)
		}
		if paused("acct." + dep) {
			t.Errorf("consumer of %s paused by a record of an open period since %v", dep, since)
		}
	}
}

// putOpen stores a record of another worker saying dep's breaker opened
// now and is open until until, as anyone allowed to write the breaker
// bucket can.
func putOpen(t *testing.T, ctx context.Context, kv jetstream.KeyValue, dep string, until time.Time) {
	t.Helper()
	putOpenSince(t, ctx, kv, dep, time.Now(), until)
}

// putOpenSince stores a record of another worker saying dep's breaker
// opened at since and is open until until.
func putOpenSince(t *testing.T, ctx context.Context, kv jetstream.KeyValue, dep string, since, until time.Time) {
	t.Helper()
	rec, err := json.Marshal(map[string]any{"dependency": dep, "state": "open", "since": since.UTC(),
		"until": until.UTC(), "worker": "forged"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, dep, rec); err != nil {
		t.Fatal(err)
	}
}
