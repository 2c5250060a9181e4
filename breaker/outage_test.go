package breaker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// fakeDep is a dependency the test switches down and up, counting calls.
type fakeDep struct {
	down      atomic.Bool
	calls     atomic.Int64
	callsDown atomic.Int64
}

func (d *fakeDep) call(context.Context) error {
	d.calls.Add(1)
	if d.down.Load() {
		d.callsDown.Add(1)
		return fmt.Errorf("503 service unavailable: %w", errDown)
	}
	return nil
}

// logBuffer collects log output, printed only when the test fails.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) logger(t *testing.T, name string) *slog.Logger {
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("JETFLOW_TEST_LOGS") != "" {
			l.mu.Lock()
			t.Logf("logs:\n%s", l.buf.String())
			l.mu.Unlock()
		}
	})
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", name)
}

// doneSet counts distinct task IDs.
type doneSet struct {
	mu  sync.Mutex
	ids map[string]bool
}

func (s *doneSet) add(id string) {
	s.mu.Lock()
	if s.ids == nil {
		s.ids = make(map[string]bool)
	}
	s.ids[id] = true
	s.mu.Unlock()
}

func (s *doneSet) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ids)
}

func consumerPaused(t *testing.T, js jetstream.JetStream, taskType string, p framework.Priority) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	names := streams.MustNames("")
	c, err := js.Consumer(ctx, names.TaskStream(), names.ConsumerName(taskType, p))
	if err != nil {
		t.Fatalf("consumer %s: %v", taskType, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info %s: %v", taskType, err)
	}
	return ci.Paused
}

func breakerRecord(t *testing.T, js jetstream.JetStream, dep string) (breaker.Record, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, streams.MustNames("").BreakerBucket())
	if err != nil {
		return breaker.Record{}, false
	}
	e, err := kv.Get(ctx, dep)
	if err != nil {
		return breaker.Record{}, false
	}
	var rec breaker.Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatalf("record %s: %v", e.Value(), err)
	}
	return rec, true
}

// TestBreakerOutage runs charges on two workers against a dependency that
// goes down: the breakers open and pause the charge consumers, only
// half-open probes reach the dependency while it is down, unrelated tasks
// keep running, no task fails and every charge completes after recovery.
func TestBreakerOutage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const (
		dep         = "pay-gw"
		charges     = 200
		mails       = 20
		threshold   = 3
		concurrency = 4
		probes      = 1
	)
	settings := breaker.Settings{ConsecutiveFailures: threshold, OpenTimeout: 300 * time.Millisecond,
		HalfOpenMaxRequests: probes}
	var d fakeDep
	d.down.Store(true)
	var charged, mailed doneSet
	var failed, retried, maxAttempt atomic.Int64
	logs := &logBuffer{}
	var trs [2]*transitions
	var workers [2]*framework.Worker
	for i := range workers {
		tr := newTransitions()
		trs[i] = tr
		w := e.worker(t, []breaker.Option{breaker.WithSettings(dep, settings)},
			framework.WithLogger(logs.logger(t, fmt.Sprint("w", i))),
			framework.WithConcurrency(concurrency),
			framework.WithHooks(framework.Hooks{
				Event: tr.event,
				Finished: func(_ context.Context, _ *framework.Task, o framework.Outcome) {
					switch o.Action {
					case framework.ActionFail:
						failed.Add(1)
					case framework.ActionRetry:
						retried.Add(1)
					}
				},
			}))
		w.HandleFunc("pay.charge", func(ctx context.Context, task *framework.Task) error {
			if err := breaker.Call(ctx, dep, d.call); err != nil {
				return err
			}
			for {
				m := maxAttempt.Load()
				if int64(task.Attempt) <= m || maxAttempt.CompareAndSwap(m, int64(task.Attempt)) {
					break
				}
			}
			charged.add(task.ID)
			return nil
		}, breaker.WithDependencies(dep), framework.WithBackoff(framework.BackoffPolicy{Initial: time.Second}))
		w.HandleFunc("mail.send", func(_ context.Context, task *framework.Task) error {
			mailed.add(task.ID)
			return nil
		})
		startWorker(t, w)
		workers[i] = w
	}
	jobs := make([]framework.TaskSpec, charges)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: "pay.charge", Payload: i}
	}
	if _, err := e.Client.EnqueueMany(t.Context(), jobs); err != nil {
		t.Fatal(err)
	}

	// Both breakers open, on their own failures or on the other's report.
	trs[0].waitTo(t, breaker.StateOpen)
	trs[1].waitTo(t, breaker.StateOpen)
	testutil.Wait(t, waitLong, "charge consumers paused", func() bool {
		return consumerPaused(t, e.JS, "pay.charge", framework.PriorityNormal) &&
			consumerPaused(t, e.JS, "pay.charge", framework.PriorityCritical)
	})
	// The bucket holds the latest change: open, or half-open when a
	// breaker already started probing.
	rec, ok := breakerRecord(t, e.JS, dep)
	if !ok || rec.State == breaker.StateClosed || !slices.Equal(rec.TaskTypes, []string{"pay.charge"}) ||
		(rec.State == breaker.StateOpen && !slices.Contains(rec.Consumers, "pay_charge-normal")) {
		t.Fatalf("breaker record = %+v, %v", rec, ok)
	}
	if consumerPaused(t, e.JS, "mail.send", framework.PriorityNormal) {
		t.Fatal("the unrelated type's consumer was paused")
	}

	// Unrelated work runs during the outage, on the same workers whose
	// slots held charges would otherwise fill.
	for i := range mails {
		if _, err := e.Client.Enqueue(t.Context(), "mail.send", i); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Wait(t, waitLong, "mails sent during the outage", func() bool { return mailed.len() == mails })

	// Let the breakers probe (and fail) a few times.
	testutil.Wait(t, waitLong, "failed probes", func() bool {
		return trs[0].count(breaker.StateHalfOpen)+trs[1].count(breaker.StateHalfOpen) >= 3
	})
	if n := trs[0].count(breaker.StateClosed) + trs[1].count(breaker.StateClosed); n != 0 {
		t.Fatalf("a breaker closed while the dependency was down (%d times)", n)
	}
	d.down.Store(false)
	halfOpens := int64(trs[0].count(breaker.StateHalfOpen) + trs[1].count(breaker.StateHalfOpen))
	down := d.callsDown.Load()

	testutil.Wait(t, waitLong, "all charges done", func() bool { return charged.len() == charges })
	if n := failed.Load(); n != 0 {
		t.Fatalf("%d tasks failed", n)
	}
	// While closed, each worker lets at most threshold failures plus the
	// calls already in flight through; after that only probes, one per
	// half-open period.
	bound := int64(2*(threshold+concurrency-1)) + halfOpens*probes
	t.Logf("calls during the outage: %d (bound %d: %d half-open periods); retried %d; max attempt %d",
		down, bound, halfOpens, retried.Load(), maxAttempt.Load())
	if down > bound {
		t.Fatalf("%d calls reached the dependency while it was down, bound %d", down, bound)
	}
	if r := retried.Load(); r > int64(2*(threshold+concurrency-1)) {
		t.Fatalf("%d attempts spent: only failures before a breaker opened may spend one", r)
	}
	if m := maxAttempt.Load(); m > 2 {
		t.Fatalf("a charge needed attempt %d: the outage spent more than one attempt", m)
	}
	// A worker whose held charges all ran elsewhere may not have probed
	// yet: one call through its breaker does, and closes it.
	for i, w := range workers {
		testutil.Wait(t, waitLong, "breaker closed", func() bool {
			_ = breaker.Of(w).Call(t.Context(), dep, d.call)
			in, _ := breaker.Of(w).State(dep)
			return in.State == breaker.StateClosed
		})
		if trs[i].count(breaker.StateClosed) == 0 {
			t.Fatalf("worker %d: no transition to closed: %v", i, trs[i].list())
		}
	}
}

// TestBreakerRemoteOpen checks that a breaker opening in one worker opens
// the breaker of the same dependency in another worker, which pauses its
// own task types that declared it, and not the others.
func TestBreakerRemoteOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const dep = "ledger"
	settings := breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: 2 * time.Second}
	var d fakeDep
	d.down.Store(true)
	logs := &logBuffer{}

	a := e.worker(t, []breaker.Option{breaker.WithSettings(dep, settings)}, framework.WithLogger(logs.logger(t, "a")))
	charged := make(chan time.Time, 1)
	a.HandleFunc("acct.charge", func(ctx context.Context, _ *framework.Task) error {
		if err := breaker.Call(ctx, dep, d.call); err != nil {
			return err
		}
		charged <- time.Now()
		return nil
	}, breaker.WithDependencies(dep))

	trB := newTransitions()
	var refundDelivered atomic.Int64 // unix nanos of the first start of the refund
	b := e.worker(t, []breaker.Option{breaker.WithSettings(dep, settings)}, framework.WithLogger(logs.logger(t, "b")),
		framework.WithHooks(framework.Hooks{
			Event: trB.event,
			Started: func(_ context.Context, task *framework.Task) {
				if task.Type == "acct.refund" {
					refundDelivered.CompareAndSwap(0, time.Now().UnixNano())
				}
			},
		}))
	refunded := make(chan time.Time, 1)
	b.HandleFunc("acct.refund", func(ctx context.Context, _ *framework.Task) error {
		if err := breaker.Call(ctx, dep, d.call); err != nil {
			return err
		}
		refunded <- time.Now()
		return nil
	}, breaker.WithDependencies(dep))
	b.HandleFunc("acct.notify", func(context.Context, *framework.Task) error { return nil })
	startWorker(t, a)
	startWorker(t, b)

	e.Enqueue(t, "acct.charge", 1)
	trB.waitTo(t, breaker.StateOpen)
	if in, _ := breaker.Of(b).State(dep); in.State != breaker.StateOpen || !in.Remote {
		t.Fatalf("b's breaker = %+v, want open by a remote report", in)
	}
	if in, _ := breaker.Of(a).State(dep); in.OpenedAt.IsZero() || in.Remote {
		t.Fatalf("a's breaker = %+v, want opened by its own failure", in)
	}
	rec, ok := breakerRecord(t, e.JS, dep)
	if !ok || rec.State != breaker.StateOpen || !slices.Contains(rec.Consumers, "acct_charge-low") {
		t.Fatalf("record = %+v", rec)
	}
	testutil.Wait(t, waitLong, "b's refund consumers paused", func() bool {
		return consumerPaused(t, e.JS, "acct.refund", framework.PriorityNormal) &&
			consumerPaused(t, e.JS, "acct.refund", framework.PriorityLow)
	})
	if consumerPaused(t, e.JS, "acct.notify", framework.PriorityNormal) {
		t.Fatal("acct.notify declared no dependency but was paused")
	}
	// A refund enqueued now is not even delivered before the pause ends
	// (the breaker alone would deliver it at once and hold it).
	e.Enqueue(t, "acct.refund", 2)
	d.down.Store(false)
	testutil.Recv(t, refunded, waitLong, "refund after the open period")
	if at := time.Unix(0, refundDelivered.Load()); at.Before(rec.Until) {
		t.Fatalf("refund delivered at %v, before the pause ended at %v", at, rec.Until)
	}
	testutil.Recv(t, charged, waitLong, "charge after recovery")
}
