package faulttest

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// heavy reports whether the heavier variants are requested (JETFLOW_HEAVY=1).
func heavy() bool { return os.Getenv("JETFLOW_HEAVY") == "1" }

// ledger records what happened to every task ID: enqueue acknowledgements,
// handler executions and successes.
type ledger struct {
	mu        sync.Mutex
	acked     map[string]bool
	runs      map[string]int
	succeeded map[string]bool
	firstRun  map[string]time.Time
	done      chan struct{} // closed when every acked task succeeded and enqueueing ended
	closing   bool
}

func newLedger() *ledger {
	return &ledger{
		acked:     make(map[string]bool),
		runs:      make(map[string]int),
		succeeded: make(map[string]bool),
		firstRun:  make(map[string]time.Time),
		done:      make(chan struct{}),
	}
}

func (l *ledger) enqueued(id string) {
	l.mu.Lock()
	l.acked[id] = true
	l.mu.Unlock()
}

func (l *ledger) ran(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.runs[id]++
	if l.runs[id] == 1 {
		l.firstRun[id] = time.Now()
	}
	return l.runs[id]
}

func (l *ledger) success(id string) {
	l.mu.Lock()
	l.succeeded[id] = true
	l.checkLocked()
	l.mu.Unlock()
}

// enqueueingDone says no more tasks will be acknowledged; done closes once
// every acknowledged one succeeded.
func (l *ledger) enqueueingDone() {
	l.mu.Lock()
	l.closing = true
	l.checkLocked()
	l.mu.Unlock()
}

func (l *ledger) checkLocked() {
	if !l.closing {
		return
	}
	select {
	case <-l.done:
		return
	default:
	}
	for id := range l.acked {
		if !l.succeeded[id] {
			return
		}
	}
	close(l.done)
}

// report is the outcome of a run.
type report struct {
	Enqueued, Succeeded, Lost, Duplicates, MaxRuns int
	LostIDs                                        []string
}

func (l *ledger) report() report {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := report{Enqueued: len(l.acked)}
	for id := range l.acked {
		if l.succeeded[id] {
			r.Succeeded++
		} else {
			r.Lost++
			r.LostIDs = append(r.LostIDs, id)
		}
	}
	for _, n := range l.runs {
		if n > 1 {
			r.Duplicates += n - 1
		}
		r.MaxRuns = max(r.MaxRuns, n)
	}
	sort.Strings(r.LostIDs)
	if len(r.LostIDs) > 10 {
		r.LostIDs = r.LostIDs[:10]
	}
	return r
}

func (r report) String() string {
	return fmt.Sprintf("enqueued=%d succeeded=%d lost=%d duplicate_executions=%d max_runs_per_task=%d",
		r.Enqueued, r.Succeeded, r.Lost, r.Duplicates, r.MaxRuns)
}

// logCounter is a slog.Handler counting records by level and message, so a
// test can report what the worker logged without printing thousands of lines.
type logCounter struct {
	mu     *sync.Mutex
	counts map[string]int // "LEVEL message" -> count
	last   map[string]string
}

func newLogCounter() *logCounter {
	return &logCounter{mu: new(sync.Mutex), counts: make(map[string]int), last: make(map[string]string)}
}

func (h *logCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	key := r.Level.String() + " " + r.Message
	var attrs []string
	r.Attrs(func(a slog.Attr) bool { attrs = append(attrs, a.String()); return true })
	h.mu.Lock()
	h.counts[key]++
	h.last[key] = strings.Join(attrs, " ")
	h.mu.Unlock()
	return nil
}

func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logCounter) WithGroup(string) slog.Handler      { return h }

// summary lists the warnings and errors logged, most frequent first, with the
// attributes of the last record of each.
func (h *logCounter) summary() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var keys []string
	for k := range h.counts {
		if strings.HasPrefix(k, "WARN") || strings.HasPrefix(k, "ERROR") {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b string) int { return h.counts[b] - h.counts[a] })
	if len(keys) == 0 {
		return "no warnings or errors logged"
	}
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %6d× %s (last: %s)", h.counts[k], k, h.last[k])
	}
	return b.String()
}

// ensure creates the topology with the given replica count and, when
// given, task partition count.
func ensure(t *testing.T, js jetstream.JetStream, replicas int, partitions ...int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cfg := streams.Config{Replicas: replicas}
	if len(partitions) > 0 {
		cfg.Partitions = partitions[0]
	}
	if _, err := streams.Ensure(ctx, js, cfg); err != nil {
		t.Fatalf("ensure topology (replicas %d, partitions %d): %v", replicas, cfg.Partitions, err)
	}
}

// newWorker returns a worker on nc, shut down at cleanup.
func newWorker(t *testing.T, nc *nats.Conn, opts ...framework.WorkerOption) *framework.Worker {
	t.Helper()
	w, err := framework.NewWorker(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	return w
}

func start(t *testing.T, w *framework.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatalf("start worker: %v", err)
	}
}

// taskStreamMsgs returns how many messages the task stream holds.
func taskStreamMsgs(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	names := streams.MustNames("")
	l, _, err := streams.DeployedLayout(ctx, js, names)
	count := l.Partitions
	if err != nil {
		t.Fatalf("task partitions: %v", err)
	}
	var n uint64
	for _, p := range names.Partitions(count) {
		s, err := js.Stream(ctx, p.TaskStream())
		if err != nil {
			t.Fatalf("task stream %s: %v", p.TaskStream(), err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("task stream %s info: %v", p.TaskStream(), err)
		}
		n += info.State.Msgs
	}
	return n
}

// waitDone waits for l.done, failing with the ledger's report and the
// output of the diagnostics functions on timeout.
func waitDone(t *testing.T, l *ledger, timeout time.Duration, diags ...func() string) {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-l.done:
	case <-timer.C:
		r := l.report()
		var d []string
		for _, f := range diags {
			d = append(d, f())
		}
		t.Fatalf("not every acknowledged task succeeded within %v: %v; first missing: %v\n%s", timeout, r, r.LostIDs, strings.Join(d, "\n"))
	}
}

// consumerState describes a task consumer for failure messages.
func consumerState(js jetstream.JetStream, consumer string) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := js.Consumer(ctx, streams.MustNames("").TaskStream(), consumer)
	if err != nil {
		return fmt.Sprintf("consumer %s: %v", consumer, err)
	}
	ci := c.CachedInfo()
	leader := ""
	if ci.Cluster != nil {
		leader = ci.Cluster.Leader
	}
	return fmt.Sprintf("consumer %s: leader %q pending %d ack_pending %d redelivered %d waiting_pulls %d delivered %+v ack_floor %+v paused %v",
		consumer, leader, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.Delivered, ci.AckFloor, ci.Paused)
}
