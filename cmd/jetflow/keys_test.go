package main

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/testutil"
)

// orderingEvent is the payload of the ordering commands' test.
type orderingEvent struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// TestOrderingCommands blocks a key with a task that fails for good and
// holds up another with a head waiting for its retry, lists both with
// ordering ls and ordering blocked, and resolves the failed one.
func TestOrderingCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	var mu sync.Mutex
	healthy := false
	ran := make(chan int, 16)
	e.worker(t, func(w *framework.Worker) {
		framework.Handle(w, "order.block", func(_ context.Context, _ *framework.Task, ev orderingEvent) error {
			mu.Lock()
			ok := healthy || ev.N != 1
			mu.Unlock()
			if !ok {
				return errors.New("gateway declined")
			}
			ran <- ev.N
			return nil
		}, framework.WithOrdering(framework.Ordering{Partitions: 1, BlockOnDeadLetter: true}), framework.WithMaxAttempts(1))
		// The head fails twice: it is delivered again, then waits an hour
		// for its next retry, holding up its partition.
		framework.Handle(w, "order.stuck", func(_ context.Context, task *framework.Task, _ orderingEvent) error {
			if task.Attempt == 1 {
				return framework.RetryAfterErr(time.Millisecond, errors.New("gateway down"))
			}
			return framework.RetryAfterErr(time.Hour, errors.New("gateway down"))
		}, framework.WithOrdering(framework.Ordering{Partitions: 2}))
	})
	var ids []string
	for n := range 3 {
		info, err := e.cl.Enqueue(ctx, "order.block", orderingEvent{Key: "order-7", N: n}, framework.Ordered("order-7"))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, info.ID)
	}
	stuck, err := e.cl.Enqueue(ctx, "order.stuck", orderingEvent{Key: "order-9"}, framework.Ordered("order-9"))
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.Recv(t, ran, waitLong, "event 0"); n != 0 {
		t.Fatalf("event %d ran first", n)
	}

	type blockedJSON struct {
		Reason, Type, Key, ID, Error, Resolution string
		Partition                                *int
		Pending                                  uint64
		Attempts                                 int
	}
	var blocked []blockedJSON
	find := func(reason string) *blockedJSON {
		for i := range blocked {
			if blocked[i].Reason == reason {
				return &blocked[i]
			}
		}
		return nil
	}
	testutil.Wait(t, waitLong, "the failed and the retrying keys listed", func() bool {
		e.ok(t, &blocked, "ordering", "blocked", "--json")
		return find("failed") != nil && find("retrying") != nil
	})
	if f := find("failed"); f.Type != "order.block" || f.Key != "order-7" || f.ID != ids[1] || f.Error != "gateway declined" || f.Attempts != 1 {
		t.Fatalf("failed key %+v, want task %s of order-7", f, ids[1])
	}
	if r := find("retrying"); r.Type != "order.stuck" || r.Key != "order-9" || r.ID != stuck.ID || r.Partition == nil {
		t.Fatalf("retrying key %+v, want task %s of order-9", r, stuck.ID)
	}
	table := e.ok(t, nil, "ordering", "blocked").stdout
	for _, want := range []string{"FAILED", "RETRYING", ids[1], stuck.ID, "gateway declined", "ordering resolve"} {
		if !strings.Contains(table, want) {
			t.Errorf("ordering blocked table lacks %q:\n%s", want, table)
		}
	}

	var parts []struct {
		Type               string
		Partition, Pending uint64
		Partitions         int
		Head               *inspect.OrderingHead
	}
	e.ok(t, &parts, "ordering", "ls", "--type", "order.block", "--json")
	if len(parts) != 1 || parts[0].Type != "order.block" || parts[0].Head == nil || parts[0].Head.TaskID != ids[1] ||
		parts[0].Head.Key != "order-7" || parts[0].Pending != 1 {
		t.Fatalf("order.block partitions %+v, want head %s with one task waiting", parts, ids[1])
	}
	e.ok(t, &parts, "ordering", "ls", "--json")
	if len(parts) != 3 {
		t.Fatalf("%d partitions, want 1 of order.block and 2 of order.stuck", len(parts))
	}
	if out := e.ok(t, nil, "ordering", "ls").stdout; !strings.Contains(out, "RETRYING") || !strings.Contains(out, "order-9") {
		t.Errorf("ordering ls table:\n%s", out)
	}

	e.fails(t, exitUsage, `exactly one of --retry and --skip`, "ordering", "resolve", ids[1])
	e.fails(t, exitUsage, `exactly one`, "ordering", "resolve", ids[1], "--retry", "--skip")
	e.fails(t, exitFailed, `not blocked`, "ordering", "resolve", ids[2], "--retry")
	e.fails(t, exitUsage, `--type`, "ordering", "ls", "--type", "bad type")
	mu.Lock()
	healthy = true
	mu.Unlock()
	var res struct{ ID, Type, Key, Resolution string }
	e.ok(t, &res, "ordering", "resolve", ids[1], "--retry", "--json")
	if res.ID != ids[1] || res.Type != "order.block" || res.Key != "order-7" || res.Resolution != inspect.ResolveRetry {
		t.Fatalf("resolve said %+v", res)
	}
	for want := 1; want <= 2; want++ {
		if n := testutil.Recv(t, ran, waitLong, "the events after the resolve"); n != want {
			t.Fatalf("event %d ran, want %d", n, want)
		}
	}
	testutil.Wait(t, waitLong, "the failed key gone from ordering blocked", func() bool {
		e.ok(t, &blocked, "ordering", "blocked", "--json")
		return find("failed") == nil
	})
}

// TestLimitsCommand lists a task type's limit and a dependency's limit
// throttled by a handler.
func TestLimitsCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	done := make(chan string, 8)
	e.worker(t, func(w *framework.Worker) {
		if _, err := breaker.Install(w); err != nil {
			t.Fatal(err)
		}
		if err := ratelimit.Install(w, ratelimit.WithDependency("gw", ratelimit.Limit{Limit: 300, Interval: time.Minute, Burst: 5})); err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("limited.job", func(context.Context, *framework.Task) error {
			done <- "limited"
			return nil
		}, ratelimit.WithLimit(ratelimit.Limit{Limit: 20, Interval: time.Second}))
		w.HandleFunc("dep.job", func(ctx context.Context, _ *framework.Task) error {
			err := breaker.Call(ctx, "gw", func(ctx context.Context) error {
				return ratelimit.Throttle(ctx, "gw", 30*time.Minute)
			})
			done <- "dep"
			return err
		})
	})

	e.ok(t, nil, "limits")
	for range 3 {
		if _, err := e.cl.Enqueue(ctx, "limited.job", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cl.Enqueue(ctx, "dep.job", nil); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		testutil.Recv(t, done, waitLong, "a task")
	}
	var limits []struct {
		Name            string
		Limit, Burst    int
		Interval        string
		IntervalSeconds float64 `json:"interval_seconds"`
		LastSecond      int     `json:"last_second"`
		PerSecond       float64 `json:"limit_per_second"`
		Throttled       bool
		ThrottledUntil  time.Time `json:"throttled_until"`
	}
	e.ok(t, &limits, "limits", "--json")
	if len(limits) != 2 {
		t.Fatalf("limits %+v, want the type's and the dependency's", limits)
	}
	dep, typ := limits[0], limits[1]
	if dep.Name != "dep.gw" || dep.Limit != 300 || dep.Interval != "1m0s" || dep.Burst != 5 || dep.PerSecond != 5 ||
		!dep.Throttled || time.Until(dep.ThrottledUntil) < 20*time.Minute {
		t.Fatalf("dependency limit %+v, want 300 per minute, burst 5, throttled for 30 minutes", dep)
	}
	if typ.Name != "type.limited.job" || typ.Limit != 20 || typ.IntervalSeconds != 1 || typ.Burst != 1 || typ.Throttled ||
		typ.LastSecond < 0 || typ.LastSecond > 20 {
		t.Fatalf("type limit %+v, want 20 per second, burst 1, not throttled", typ)
	}
	table := e.ok(t, nil, "limits").stdout
	for _, want := range []string{"LAST SECOND", "dep.gw", "300 / 1m0s", "type.limited.job", "20 / 1s"} {
		if !strings.Contains(table, want) {
			t.Errorf("limits table lacks %q:\n%s", want, table)
		}
	}
	e.fails(t, exitUsage, `no arguments`, "limits", "extra")
}

// TestUniqueCommand lists the reservations of unique tasks.
func TestUniqueCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	if out := e.ok(t, nil, "unique", "ls").stdout; !strings.Contains(out, "no uniqueness reservations") {
		t.Fatalf("unique ls before any reservation: %q", out)
	}
	day, err := e.cl.Enqueue(ctx, "settle.day", map[string]string{"day": "2026-11-30"}, framework.Unique(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dup, err := e.cl.Enqueue(ctx, "settle.day", map[string]string{"day": "2026-11-30"}, framework.Unique(24*time.Hour))
	if err != nil || !dup.Duplicate {
		t.Fatalf("second enqueue %+v, %v: want a duplicate", dup, err)
	}
	batch, err := e.cl.Enqueue(ctx, "import.batch", 7, framework.Unique(time.Hour), framework.UniqueKey("batch-7"), framework.UniqueUntilDone())
	if err != nil {
		t.Fatal(err)
	}
	type resJSON struct {
		Type, Hash, ID string
		Until          time.Time
		UntilDone      bool `json:"until_done"`
	}
	var res []resJSON
	e.ok(t, &res, "unique", "ls", "--json")
	if len(res) != 2 {
		t.Fatalf("reservations %+v, want 2", res)
	}
	// Sorted by the end of the period: the hour before the day.
	b, d := res[0], res[1]
	if b.Type != "import.batch" || b.ID != batch.ID || !b.UntilDone || b.Hash == "" || time.Until(b.Until) < 50*time.Minute {
		t.Fatalf("batch reservation %+v, want task %s until done", b, batch.ID)
	}
	if d.Type != "settle.day" || d.ID != day.ID || d.UntilDone || d.Hash == "" || time.Until(d.Until) < 23*time.Hour {
		t.Fatalf("day reservation %+v, want task %s for a day", d, day.ID)
	}
	e.ok(t, &res, "unique", "ls", "--type", "settle.day", "--json")
	if len(res) != 1 || res[0].ID != day.ID {
		t.Fatalf("reservations of settle.day %+v", res)
	}
	table := e.ok(t, nil, "unique", "ls").stdout
	for _, want := range []string{"KEY HASH", day.ID, batch.ID, "when the task succeeds", "at the end of the period"} {
		if !strings.Contains(table, want) {
			t.Errorf("unique ls table lacks %q:\n%s", want, table)
		}
	}
	e.fails(t, exitUsage, `--type`, "unique", "ls", "--type", "a b")
	if !slices.ContainsFunc(strings.Split(e.ok(t, nil, "help").stdout, "\n"), func(l string) bool {
		return strings.Contains(l, "unique ls") && strings.Contains(l, "reservations")
	}) {
		t.Error("help does not list unique ls")
	}
}
