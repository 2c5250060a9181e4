package framework_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

var errBoom = errors.New("boom")

func TestRetriesExhaustMaxAttemptsWithGrowingDelays(t *testing.T) {
	t.Parallel()
	const typ = "retry.always"
	const maxAttempts = 4
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	var mu sync.Mutex
	var starts []time.Time
	var attempts []int
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		starts = append(starts, time.Now())
		attempts = append(attempts, task.Attempt)
		mu.Unlock()
		if task.MaxAttempts != maxAttempts {
			t.Errorf("Task.MaxAttempts = %d, want %d", task.MaxAttempts, maxAttempts)
		}
		return errBoom
	}, framework.WithMaxAttempts(maxAttempts),
		framework.WithBackoff(framework.BackoffPolicy{Initial: 20 * time.Millisecond, Multiplier: 2, Randomization: -1}))
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("r1"))

	failed := rec.waitFor(t, "failed", "r1")
	if !errors.Is(failed.Err, errBoom) || failed.Attempt != maxAttempts {
		t.Fatalf("Failed hook: attempt %d, err %v", failed.Attempt, failed.Err)
	}
	ci := e.waitSettled(t, typ, framework.PriorityNormal)
	if ci.Delivered.Consumer != maxAttempts {
		t.Errorf("server delivered %d times, want %d", ci.Delivered.Consumer, maxAttempts)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []int{1, 2, 3, 4}; !slices.Equal(attempts, want) {
		t.Fatalf("attempts %v, want %v", attempts, want)
	}
	var delays []time.Duration
	for _, ev := range rec.of("r1") {
		if ev.Hook == "retried" {
			delays = append(delays, ev.Delay)
		}
	}
	wantDelays := []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}
	if !slices.Equal(delays, wantDelays) {
		t.Fatalf("retry delays %v, want %v", delays, wantDelays)
	}
	for i := 1; i < len(starts); i++ {
		gap := starts[i].Sub(starts[i-1])
		t.Logf("attempt %d started %v after attempt %d (backoff %v)", i+1, gap, i, wantDelays[i-1])
		if gap < wantDelays[i-1] {
			t.Errorf("attempt %d started %v after the previous one, before its backoff %v", i+1, gap, wantDelays[i-1])
		}
	}
	if got := rec.count("failed", "r1"); got != 1 {
		t.Errorf("Failed hook called %d times", got)
	}
	if st := w.Stats(); st.Started != maxAttempts || st.Retried != maxAttempts-1 || st.Failed != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestRetryAfterOverridesBackoff(t *testing.T) {
	t.Parallel()
	const typ = "retry.after"
	const after = 300 * time.Millisecond
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		if task.Attempt == 1 {
			return framework.RetryAfterErr(after, errBoom)
		}
		return nil
	}, // A backoff this long would never retry within the test.
		framework.WithBackoff(framework.BackoffPolicy{Initial: time.Hour, Randomization: -1}))
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("ra"))

	ok := rec.waitFor(t, "succeeded", "ra")
	evs := rec.of("ra")
	var first, retried event
	for _, ev := range evs {
		switch {
		case ev.Hook == "started" && ev.Attempt == 1:
			first = ev
		case ev.Hook == "retried":
			retried = ev
		}
	}
	if retried.Delay != after || !errors.Is(retried.Err, errBoom) {
		t.Fatalf("Retried hook: delay %v err %v, want %v and the cause", retried.Delay, retried.Err, after)
	}
	if ok.Attempt != 2 {
		t.Errorf("succeeded on attempt %d, want 2", ok.Attempt)
	}
	if gap := ok.At.Sub(first.At); gap < after {
		t.Errorf("second attempt finished %v after the first started, before the requested %v", gap, after)
	}
}

func TestPermanentErrorIsNotRetried(t *testing.T) {
	t.Parallel()
	const typ = "retry.permanent"
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	var runs atomic.Int32
	w.HandleFunc(typ, func(context.Context, *framework.Task) error {
		runs.Add(1)
		return framework.Permanent(errBoom)
	}, framework.WithMaxAttempts(5), framework.WithBackoff(framework.BackoffPolicy{Initial: time.Millisecond}))
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("p1"))

	failed := rec.waitFor(t, "failed", "p1")
	if !framework.IsPermanent(failed.Err) || !errors.Is(failed.Err, errBoom) {
		t.Fatalf("Failed hook err = %v, want a permanent errBoom", failed.Err)
	}
	ci := e.waitSettled(t, typ, framework.PriorityNormal)
	if runs.Load() != 1 || ci.Delivered.Consumer != 1 {
		t.Fatalf("handler ran %d times, server delivered %d times; want 1", runs.Load(), ci.Delivered.Consumer)
	}
	if rec.count("retried", "p1") != 0 {
		t.Errorf("permanent failure reported as retried")
	}
	// Terminated: a work-queue stream drops it (the server removes it
	// just after the consumer's state shows the termination).
	testutil.Wait(t, waitLong, "task stream empty after a permanent failure", func() bool { return e.taskStreamMsgs(t) == 0 })
}

func TestPanicIsRecoveredAndWorkerKeepsGoing(t *testing.T) {
	t.Parallel()
	const typ = "retry.panic"
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()), framework.WithConcurrency(1))
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		if task.ID == "bomb" {
			panic("kaboom")
		}
		return nil
	}, framework.WithMaxAttempts(2), framework.WithBackoff(framework.BackoffPolicy{Initial: time.Millisecond}))
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("bomb"))
	for i := range 5 {
		e.enqueue(t, typ, nil, framework.WithID(fmt.Sprintf("ok%d", i)))
	}

	failed := rec.waitFor(t, "failed", "bomb")
	if !errors.Is(failed.Err, framework.ErrPanic) || !strings.Contains(failed.Err.Error(), "kaboom") {
		t.Fatalf("Failed hook err = %v, want ErrPanic with the panic value", failed.Err)
	}
	retried := rec.waitFor(t, "retried", "bomb")
	if !errors.Is(retried.Err, framework.ErrPanic) {
		t.Fatalf("Retried hook err = %v, want ErrPanic", retried.Err)
	}
	for i := range 5 {
		rec.waitFor(t, "succeeded", fmt.Sprintf("ok%d", i))
	}
	// The single slot is still usable after the panics.
	e.enqueue(t, typ, nil, framework.WithID("after"))
	rec.waitFor(t, "succeeded", "after")
	if st := w.Stats(); st.Panics != 2 || st.Succeeded != 6 {
		t.Errorf("stats %+v, want 2 panics and 6 successes", st)
	}
}

func TestLongHandlerIsNotRedelivered(t *testing.T) {
	t.Parallel()
	const typ = "long.run"
	const ackWait = time.Second
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	var runs atomic.Int32
	w.HandleFunc(typ, func(ctx context.Context, _ *framework.Task) error {
		runs.Add(1)
		// The work itself: three ack waits long.
		select {
		case <-time.After(3 * ackWait):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, framework.WithAckWait(ackWait))
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("long"))

	rec.waitFor(t, "succeeded", "long")
	ci := e.waitSettled(t, typ, framework.PriorityNormal)
	if runs.Load() != 1 || ci.Delivered.Consumer != 1 || ci.NumRedelivered != 0 {
		t.Fatalf("handler ran %d times, server delivered %d times (%d redelivered); want exactly once",
			runs.Load(), ci.Delivered.Consumer, ci.NumRedelivered)
	}
	if ci.Config.AckWait != ackWait {
		t.Errorf("consumer AckWait = %v, want %v", ci.Config.AckWait, ackWait)
	}
}

func TestHandlerTimeout(t *testing.T) {
	t.Parallel()
	const typ = "timeout.run"
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	causes := make(chan error, 4)
	w.HandleFunc(typ, func(ctx context.Context, _ *framework.Task) error {
		select {
		case <-ctx.Done():
			causes <- context.Cause(ctx)
			return ctx.Err()
		case <-time.After(waitLong):
			return errors.New("handler context was never cancelled")
		}
	}, framework.WithTimeout(100*time.Millisecond), framework.WithMaxAttempts(2),
		framework.WithBackoff(framework.BackoffPolicy{Initial: time.Millisecond}))
	startWorker(t, w)
	e.enqueue(t, typ, nil, framework.WithID("slow"))

	for i := range 2 {
		if c := testutil.Recv(t, causes, waitLong, "handler cancelled"); !errors.Is(c, framework.ErrHandlerTimeout) {
			t.Fatalf("attempt %d: context cause %v, want ErrHandlerTimeout", i+1, c)
		}
	}
	retried := rec.waitFor(t, "retried", "slow")
	if !errors.Is(retried.Err, framework.ErrHandlerTimeout) || !errors.Is(retried.Err, context.DeadlineExceeded) {
		t.Errorf("Retried err = %v, want ErrHandlerTimeout wrapping the handler's error", retried.Err)
	}
	failed := rec.waitFor(t, "failed", "slow")
	if failed.Attempt != 2 || !errors.Is(failed.Err, framework.ErrHandlerTimeout) {
		t.Errorf("Failed hook: attempt %d err %v", failed.Attempt, failed.Err)
	}
	if ci := e.waitSettled(t, typ, framework.PriorityNormal); ci.Delivered.Consumer != 2 {
		t.Errorf("delivered %d times, want 2", ci.Delivered.Consumer)
	}
}

func TestDuplicateIDRunsOnce(t *testing.T) {
	t.Parallel()
	const typ = "dup.run"
	e := newEnv(t)
	rec := newRecorder()
	w := e.worker(t, framework.WithHooks(rec.hooks()))
	var mu sync.Mutex
	runs := map[string]int{}
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		return nil
	})

	cases := []struct {
		id          string
		first, then []framework.EnqueueOption
	}{
		{"immediate", nil, nil},
		{"delayed", []framework.EnqueueOption{framework.In(300 * time.Millisecond)}, []framework.EnqueueOption{framework.In(300 * time.Millisecond)}},
		// An immediate and a delayed enqueue of one ID are not duplicates
		// of each other: they are stored in different streams, each with
		// its own duplicate window (decision 012).
	}
	for _, c := range cases {
		a := e.enqueue(t, typ, nil, append(c.first, framework.WithID(c.id))...)
		b := e.enqueue(t, typ, nil, append(c.then, framework.WithID(c.id))...)
		if a.Duplicate || !b.Duplicate {
			t.Errorf("%s: Duplicate first=%v second=%v, want false, true", c.id, a.Duplicate, b.Duplicate)
		}
		if b.Sequence != a.Sequence {
			t.Errorf("%s: second enqueue reports sequence %d, first %d", c.id, b.Sequence, a.Sequence)
		}
	}
	if n := e.taskStreamMsgs(t); n != uint64(len(cases)) {
		t.Fatalf("task stream holds %d messages for %d distinct IDs", n, len(cases))
	}
	startWorker(t, w)
	for _, c := range cases {
		rec.waitFor(t, "succeeded", c.id)
	}
	e.waitSettled(t, typ, framework.PriorityNormal)
	testutil.Wait(t, waitLong, "task stream empty", func() bool { return e.taskStreamMsgs(t) == 0 })
	mu.Lock()
	defer mu.Unlock()
	for _, c := range cases {
		if runs[c.id] != 1 {
			t.Errorf("%s ran %d times, want 1", c.id, runs[c.id])
		}
	}
}

func TestEnqueueManyAllArrive(t *testing.T) {
	t.Parallel()
	const typ = "many.run"
	const n = 3000
	e := newEnv(t)
	w := e.worker(t)
	var mu sync.Mutex
	seen := make(map[string]int, n)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		seen[string(task.Payload)]++
		mu.Unlock()
		return nil
	})
	jobs := make([]framework.TaskSpec, n)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: typ, Payload: []byte(fmt.Sprint(i)),
			Options: []framework.EnqueueOption{framework.WithPriority(streams.Priorities[i%4])}}
	}
	infos, err := e.cl.EnqueueMany(t.Context(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for i, info := range infos {
		if info.ID == "" || info.Sequence == 0 || info.Type != typ || info.Priority != streams.Priorities[i%4] {
			t.Fatalf("info %d = %+v", i, info)
		}
		ids[info.ID] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct IDs for %d jobs", len(ids), n)
	}
	startWorker(t, w)
	testutil.Wait(t, waitLong, "all tasks handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == n
	})
	for _, p := range streams.Priorities {
		e.waitSettled(t, typ, p)
	}
	mu.Lock()
	defer mu.Unlock()
	for k, c := range seen {
		if c != 1 {
			t.Errorf("task %s ran %d times", k, c)
		}
	}
}

func TestEnqueueManyWithSmallWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// A window far smaller than the batch: EnqueueMany must wait for
	// acknowledgements rather than fail items.
	cl, err := framework.NewClient(e.nc, framework.WithMaxPending(8))
	if err != nil {
		t.Fatal(err)
	}
	jobs := make([]framework.TaskSpec, 1000)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: "many.window", Payload: i}
	}
	infos, err := cl.EnqueueMany(t.Context(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	for i, info := range infos {
		if info.Sequence == 0 {
			t.Fatalf("item %d not stored: %+v", i, info)
		}
	}
	if n := e.taskStreamMsgs(t); n != uint64(len(jobs)) {
		t.Fatalf("task stream holds %d messages, want %d", n, len(jobs))
	}
}

func TestEnqueueManyBatchError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const typ = "many.mixed"
	jobs := []framework.TaskSpec{
		{Type: typ, Payload: 1},
		{Type: "Bad Type", Payload: 2},
		{Type: typ, Payload: 3},
		{Type: typ, Payload: 4, Options: []framework.EnqueueOption{framework.WithID("not valid")}},
		{Type: typ, Payload: make(chan int)},
		{Type: typ, Payload: 6, Options: []framework.EnqueueOption{framework.WithPriority(framework.PriorityCritical)}},
	}
	infos, err := e.cl.EnqueueMany(t.Context(), jobs)
	var be *framework.BatchError
	if !errors.As(err, &be) {
		t.Fatalf("EnqueueMany error %v (%T), want *BatchError", err, err)
	}
	var failed []int
	for i := range be.Errors {
		failed = append(failed, i)
	}
	slices.Sort(failed)
	if !slices.Equal(failed, []int{1, 3, 4}) {
		t.Fatalf("failed items %v, want [1 3 4]: %v", failed, err)
	}
	if !errors.Is(be.Errors[1], framework.ErrInvalidTaskType) ||
		!errors.Is(be.Errors[3], framework.ErrInvalidID) ||
		!errors.Is(be.Errors[4], framework.ErrEncode) {
		t.Errorf("item errors: %v", be.Errors)
	}
	for _, target := range []error{framework.ErrInvalidTaskType, framework.ErrInvalidID, framework.ErrEncode} {
		if !errors.Is(err, target) {
			t.Errorf("BatchError does not unwrap to %v", target)
		}
	}
	if !strings.Contains(err.Error(), "3 of the batch") || !strings.Contains(err.Error(), "item 1") {
		t.Errorf("message %q should count failures and name the first", err)
	}
	for i, info := range infos {
		stored := info.Sequence != 0
		if want := !slices.Contains(failed, i); stored != want {
			t.Errorf("item %d: stored=%v, want %v (%+v)", i, stored, want, info)
		}
	}
	if infos[5].Priority != framework.PriorityCritical || infos[5].Subject != "jetflow.task.critical.many.mixed" {
		t.Errorf("item 5: %+v", infos[5])
	}
	if n := e.taskStreamMsgs(t); n != 3 {
		t.Errorf("task stream holds %d messages, want the 3 valid ones", n)
	}
}

// logCapture is a slog.Handler keeping every record's attributes, the
// handler's own included.
type logCapture struct {
	mu    *sync.Mutex
	recs  *[]map[string]string
	attrs []slog.Attr
}

func newLogCapture() *logCapture {
	return &logCapture{mu: new(sync.Mutex), recs: new([]map[string]string)}
}

func (h *logCapture) Enabled(context.Context, slog.Level) bool { return true }

func (h *logCapture) Handle(_ context.Context, r slog.Record) error {
	m := map[string]string{"msg": r.Message}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
	h.mu.Lock()
	*h.recs = append(*h.recs, m)
	h.mu.Unlock()
	return nil
}

func (h *logCapture) WithAttrs(as []slog.Attr) slog.Handler {
	c := *h
	c.attrs = append(slices.Clone(h.attrs), as...)
	return &c
}

func (h *logCapture) WithGroup(string) slog.Handler { return h }

func (h *logCapture) find(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, m := range *h.recs {
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func TestHooksAndTaskFields(t *testing.T) {
	t.Parallel()
	const typ = "fields.check"
	e := newEnv(t)
	enqueued := make(chan framework.TaskInfo, 4)
	cl, err := framework.NewClient(e.nc, framework.WithHooks(framework.Hooks{
		Enqueued: func(_ context.Context, info framework.TaskInfo) { enqueued <- info },
	}))
	if err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	logs := newLogCapture()
	w := e.worker(t, framework.WithHooks(rec.hooks()), framework.WithLogger(slog.New(logs)))

	type seenTask struct {
		task        framework.Task
		tenant      string
		payload     greeting
		ctxTaskOK   bool
		ctxWorkerOK bool
	}
	seen := make(chan seenTask, 4)
	framework.Handle(w, typ, func(ctx context.Context, task *framework.Task, g greeting) error {
		seen <- seenTask{
			task:        *task,
			tenant:      task.Header("X-Tenant"),
			payload:     g,
			ctxTaskOK:   framework.TaskFromContext(ctx) == task,
			ctxWorkerOK: framework.TaskFromContext(ctx).Worker() == w,
		}
		task.Logger().Info("from task logger")
		framework.LoggerFromContext(ctx).Info("from ctx logger")
		if task.Attempt == 1 {
			return errBoom
		}
		return nil
	}, framework.WithMaxAttempts(3), framework.WithBackoff(framework.BackoffPolicy{Initial: time.Millisecond}))
	w.HandleFunc("fields.fail", func(context.Context, *framework.Task) error { return errBoom },
		framework.WithMaxAttempts(1))
	startWorker(t, w)

	before := time.Now()
	info, err := cl.Enqueue(t.Context(), typ, greeting{Name: "ada"}, framework.WithID("f1"),
		framework.WithPriority(framework.PriorityHigh), framework.WithHeader("X-Tenant", "acme"))
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if got := testutil.Recv(t, enqueued, waitLong, "Enqueued hook"); got != info {
		t.Errorf("Enqueued hook got %+v, Enqueue returned %+v", got, info)
	}
	if info.ID != "f1" || info.Type != typ || info.Priority != framework.PriorityHigh ||
		info.Stream != "JETFLOW_TASKS" || info.Sequence == 0 || info.Duplicate {
		t.Errorf("TaskInfo %+v", info)
	}

	for attempt := 1; attempt <= 2; attempt++ {
		s := testutil.Recv(t, seen, waitLong, "handler call")
		task := s.task
		if task.ID != "f1" || task.Type != typ || task.Priority != framework.PriorityHigh ||
			task.Attempt != attempt || task.MaxAttempts != 3 {
			t.Errorf("attempt %d: task %+v", attempt, task)
		}
		if task.Stream != info.Stream || task.Sequence != info.Sequence {
			t.Errorf("attempt %d: task at %s/%d, enqueued at %s/%d", attempt, task.Stream, task.Sequence, info.Stream, info.Sequence)
		}
		if task.EnqueuedAt.Before(before.Add(-time.Millisecond)) || task.EnqueuedAt.After(after) {
			t.Errorf("EnqueuedAt %v not within the Enqueue call [%v, %v]", task.EnqueuedAt, before, after)
		}
		if !task.ScheduledFor.IsZero() {
			t.Errorf("immediate task has ScheduledFor %v", task.ScheduledFor)
		}
		if s.tenant != "acme" || s.payload.Name != "ada" || string(task.Payload) != `{"name":"ada"}` {
			t.Errorf("header %q, payload %+v / %s", s.tenant, s.payload, task.Payload)
		}
		if !s.ctxTaskOK || !s.ctxWorkerOK {
			t.Errorf("TaskFromContext ok=%v, TaskFromContext(ctx).Worker() ok=%v", s.ctxTaskOK, s.ctxWorkerOK)
		}
	}
	rec.waitFor(t, "succeeded", "f1")
	e.enqueue(t, "fields.fail", nil, framework.WithID("f2"))
	rec.waitFor(t, "failed", "f2")

	hooks := func(id string) []string {
		var out []string
		for _, ev := range rec.of(id) {
			out = append(out, fmt.Sprintf("%s#%d", ev.Hook, ev.Attempt))
		}
		return out
	}
	if got, want := hooks("f1"), []string{"started#1", "retried#1", "started#2", "succeeded#2"}; !slices.Equal(got, want) {
		t.Errorf("hooks of f1: %v, want %v", got, want)
	}
	if got, want := hooks("f2"), []string{"started#1", "failed#1"}; !slices.Equal(got, want) {
		t.Errorf("hooks of f2: %v, want %v", got, want)
	}

	for _, msg := range []string{"from task logger", "from ctx logger"} {
		recs := logs.find(msg)
		if len(recs) != 2 {
			t.Fatalf("%q logged %d times, want 2", msg, len(recs))
		}
		for i, r := range recs {
			want := map[string]string{
				framework.LogKeyTaskID:   "f1",
				framework.LogKeyTaskType: typ,
				framework.LogKeyPriority: "high",
				framework.LogKeyAttempt:  fmt.Sprint(i + 1),
			}
			for k, v := range want {
				if r[k] != v {
					t.Errorf("%q record %d: %s=%q, want %q (%v)", msg, i, k, r[k], v, r)
				}
			}
		}
	}
	// Payloads are never logged.
	logs.mu.Lock()
	defer logs.mu.Unlock()
	for _, r := range *logs.recs {
		for k, v := range r {
			if strings.Contains(v, "ada") {
				t.Errorf("payload leaked into log attribute %s of %v", k, r)
			}
		}
	}
}

func TestTasksWaitingForASlotAreKeptAlive(t *testing.T) {
	t.Parallel()
	const typ = "long.queue"
	const ackWait = time.Second
	e := newEnv(t)
	w := e.worker(t, framework.WithConcurrency(1))
	var mu sync.Mutex
	runs := map[string]int{}
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		mu.Lock()
		runs[task.ID]++
		mu.Unlock()
		// Each task outlasts the ack wait, so the next one waits for the
		// single slot longer than the ack wait too.
		select {
		case <-time.After(ackWait * 3 / 2):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, framework.WithAckWait(ackWait))
	for i := range 3 {
		e.enqueue(t, typ, nil, framework.WithID(fmt.Sprint("q", i)))
	}
	startWorker(t, w)
	testutil.Wait(t, waitLong, "three tasks ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == 3
	})
	ci := e.waitSettled(t, typ, framework.PriorityNormal)
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("task %s ran %d times", id, n)
		}
	}
	if ci.NumRedelivered != 0 || ci.Delivered.Consumer != 3 {
		t.Errorf("server delivered %d times, %d redelivered; want 3 and 0", ci.Delivered.Consumer, ci.NumRedelivered)
	}
}
