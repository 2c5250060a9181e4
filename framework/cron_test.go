package framework_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// fire is one delivery of a task fired by a repeating schedule.
type fire struct {
	ID       string
	Key      string // IdempotencyKey(ctx)
	Fire     framework.ScheduleFire
	Enqueued time.Time
	Payload  string
	Header   string
}

// fireLog collects the deliveries of scheduled tasks.
type fireLog struct {
	mu    sync.Mutex
	fires []fire
	ch    chan fire
}

func newFireLog() *fireLog { return &fireLog{ch: make(chan fire, 1024)} }

// handler records each delivery.
func (l *fireLog) handler(ctx context.Context, t *framework.Task) error {
	f, ok := t.ScheduleFire()
	if !ok {
		return framework.Permanent(errors.New("not a scheduled fire"))
	}
	ev := fire{ID: t.ID, Key: framework.IdempotencyKey(ctx), Fire: f, Enqueued: t.EnqueuedAt,
		Payload: string(t.Payload), Header: t.Header("X-Tenant")}
	l.mu.Lock()
	l.fires = append(l.fires, ev)
	l.mu.Unlock()
	l.ch <- ev
	return nil
}

func (l *fireLog) all() []fire {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]fire(nil), l.fires...)
}

// next waits for the next fire of schedule name.
func (l *fireLog) next(t *testing.T, name string) fire {
	t.Helper()
	deadline := time.After(waitLong)
	for {
		select {
		case f := <-l.ch:
			if f.Fire.Name == name {
				return f
			}
		case <-deadline:
			t.Fatalf("no fire of schedule %s within %v", name, waitLong)
		}
	}
}

// cronSubjects returns the stored messages per cron subject.
func cronSubjects(t *testing.T, js jetstream.JetStream) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	names := streams.MustNames("")
	s, err := js.Stream(ctx, names.ScheduleStream())
	if err != nil {
		t.Fatal(err)
	}
	si, err := s.Info(ctx, jetstream.WithSubjectFilter(names.CronSubject(">")))
	if err != nil {
		t.Fatal(err)
	}
	return si.State.Subjects
}

func TestCronConcurrentRegistrationFiresOncePerTick(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	log := newFireLog()
	const procs = 3
	sched := schedule.Definition{Name: "coupons", Spec: "@every 1s", Type: "cron.coupons",
		Payload: map[string]int{"amount": 5}, Headers: map[string]string{"X-Tenant": "acme"}}

	// Three processes, each with its own connection, a client that
	// registers the schedule and a worker that serves the task type.
	results := make(chan schedule.Result, procs)
	errs := make(chan error, procs)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range procs {
		nc := testutil.Connect(t, e.srv)
		cl, err := framework.NewClient(nc)
		if err != nil {
			t.Fatal(err)
		}
		w, err := framework.NewWorker(nc)
		if err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("cron.coupons", log.handler)
		startWorker(t, w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := schedule.New(cl).Register(t.Context(), sched)
			if err != nil {
				errs <- err
				return
			}
			results <- r
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatalf("register: %v", err)
	}
	count := map[schedule.Result]int{}
	for r := range results {
		count[r]++
	}
	if count[schedule.Created] != 1 || count[schedule.Unchanged] != procs-1 {
		t.Fatalf("register results %v, want one created and %d unchanged", count, procs-1)
	}
	if subs := cronSubjects(t, e.js); len(subs) != 1 || subs["jetflow.cron.coupons"] != 1 {
		t.Fatalf("cron subjects %v, want one message on jetflow.cron.coupons", subs)
	}
	info, err := schedule.New(e.cl).Get(t.Context(), "coupons")
	if err != nil {
		t.Fatal(err)
	}

	// Wait for five ticks.
	ticks := map[string]bool{}
	for len(ticks) < 5 {
		f := log.next(t, "coupons")
		ticks[f.ID] = true
		if len(ticks) == 2 {
			// Registering again mid-way changes nothing and keeps the timing.
			if r, err := schedule.New(e.cl).Register(t.Context(), sched); err != nil || r != schedule.Unchanged {
				t.Fatalf("re-register = %v, %v; want unchanged", r, err)
			}
		}
	}
	fires := log.all()
	perSecond := map[int64]int{}
	var last time.Time
	for i, f := range fires {
		perSecond[f.Fire.Time.Unix()]++
		if f.Key != f.ID {
			t.Errorf("fire %d: IdempotencyKey %q != task ID %q", i, f.Key, f.ID)
		}
		want := "cron-coupons-" + f.Fire.Time.UTC().Format("20060102T150405Z")
		if f.ID != want {
			t.Errorf("fire %d: ID %q, want %q", i, f.ID, want)
		}
		if f.Fire.Time.Nanosecond() != 0 || f.Fire.Time.After(f.Enqueued) || f.Enqueued.Sub(f.Fire.Time) > 5*time.Second {
			t.Errorf("fire %d: nominal time %s vs enqueued %s", i, f.Fire.Time, f.Enqueued)
		}
		if f.Fire.Next.Sub(f.Fire.Time) != time.Second {
			t.Errorf("fire %d: next %s is not one interval after %s", i, f.Fire.Next, f.Fire.Time)
		}
		if f.Payload != `{"amount":5}` || f.Header != "acme" {
			t.Errorf("fire %d: payload %q header %q", i, f.Payload, f.Header)
		}
		if !last.IsZero() && !f.Fire.Time.After(last) {
			t.Errorf("fire %d at %s is not after the previous one at %s", i, f.Fire.Time, last)
		}
		last = f.Fire.Time
	}
	for sec, n := range perSecond {
		if n != 1 {
			t.Errorf("tick %s fired %d times", time.Unix(sec, 0).UTC(), n)
		}
	}
	after, err := schedule.New(e.cl).Get(t.Context(), "coupons")
	if err != nil {
		t.Fatal(err)
	}
	if after.Sequence != info.Sequence {
		t.Errorf("schedule rewritten: sequence %d, then %d", info.Sequence, after.Sequence)
	}
}

func TestCronSurvivesServerRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testutil.WithListen())
	log := newFireLog()
	w := e.worker(t)
	w.HandleFunc("cron.restart", log.handler)
	startWorker(t, w)
	if _, err := schedule.New(e.cl).Register(t.Context(), schedule.Definition{Name: "heartbeat", Spec: "@every 1s", Type: "cron.restart"}); err != nil {
		t.Fatal(err)
	}
	log.next(t, "heartbeat")

	testutil.RestartServer(t, e.srv)
	restarted := time.Now()
	for {
		f := log.next(t, "heartbeat")
		if f.Enqueued.After(restarted) {
			break
		}
	}
	if _, err := schedule.New(e.cl).Get(t.Context(), "heartbeat"); err != nil {
		t.Fatalf("schedule lost in the restart: %v", err)
	}
}

func TestCronTimeZone(t *testing.T) {
	t.Parallel()
	// Kathmandu is UTC+5:45: a cron expression evaluated in UTC by mistake
	// would fire at another time of day (never within this test).
	loc, err := time.LoadLocation("Asia/Kathmandu")
	if err != nil {
		t.Skipf("time zone data not available: %v", err)
	}
	e := newEnv(t)
	log := newFireLog()
	w := e.worker(t)
	w.HandleFunc("cron.zone", log.handler)
	startWorker(t, w)

	var due time.Time
	for range 5 {
		due = time.Now().Add(3 * time.Second).Truncate(time.Second)
		local := due.In(loc)
		spec := local.Format("5 4 15") + " * * *" // sec min hour in Kathmandu
		sc := schedule.Definition{Name: "zoned", Spec: spec, TimeZone: "Asia/Kathmandu", Type: "cron.zone"}
		if _, err := schedule.New(e.cl).Register(t.Context(), sc); err != nil {
			t.Fatal(err)
		}
		info, err := schedule.New(e.cl).Get(t.Context(), "zoned")
		if err != nil {
			t.Fatal(err)
		}
		if time.Until(due) > 500*time.Millisecond {
			if !info.Next.Equal(due) {
				t.Fatalf("Next = %s, want %s", info.Next, due)
			}
			break
		}
		// Registered too close to the due time on a busy machine: retry.
		if err := schedule.New(e.cl).Remove(t.Context(), "zoned"); err != nil {
			t.Fatal(err)
		}
		due = time.Time{}
	}
	if due.IsZero() {
		t.Fatal("could not register the schedule ahead of its due time")
	}
	f := log.next(t, "zoned")
	if !f.Fire.Time.Equal(due) {
		t.Fatalf("fired for %s, want %s", f.Fire.Time, due)
	}
	if f.Enqueued.Before(due) {
		t.Fatalf("fired early: at %s, due %s", f.Enqueued, due)
	}
	// The server's own next fire time agrees with ours: the same time of day
	// in Kathmandu tomorrow.
	if want := due.In(loc).AddDate(0, 0, 1); !f.Fire.Next.Equal(want) {
		t.Fatalf("server next %s, want %s", f.Fire.Next, want)
	}
}

func TestCronRemoveStopsFiring(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	log := newFireLog()
	w := e.worker(t)
	w.HandleFunc("cron.remove", log.handler)
	startWorker(t, w)
	s := schedule.New(e.cl)
	if _, err := s.Register(t.Context(), schedule.Definition{Name: "doomed", Spec: "@every 1s", Type: "cron.remove"}); err != nil {
		t.Fatal(err)
	}
	log.next(t, "doomed")
	if err := s.Remove(t.Context(), "doomed"); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	if _, err := s.Get(t.Context(), "doomed"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("Get after Remove: %v, want ErrNotFound", err)
	}
	if err := s.Remove(t.Context(), "doomed"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("second Remove: %v, want ErrNotFound", err)
	}
	// A sentinel schedule ticking twice proves time went by.
	if _, err := s.Register(t.Context(), schedule.Definition{Name: "sentinel", Spec: "@every 1s", Type: "cron.remove"}); err != nil {
		t.Fatal(err)
	}
	log.next(t, "sentinel")
	log.next(t, "sentinel")
	for _, f := range log.all() {
		// A tick stored at the very moment of the purge may still arrive.
		if f.Fire.Name == "doomed" && f.Enqueued.After(removed.Add(100*time.Millisecond)) {
			t.Fatalf("removed schedule fired at %s (removed at %s)", f.Enqueued, removed)
		}
	}
}

func TestScheduleRegisterUpdateList(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := schedule.New(e.cl)
	ctx := t.Context()
	daily := schedule.Definition{Name: "report", Spec: "30 6 * * *", TimeZone: "Europe/Berlin", Type: "reports.daily",
		Payload: "v1", Priority: framework.PriorityHigh}
	if r, err := s.Register(ctx, daily); err != nil || r != schedule.Created {
		t.Fatalf("register = %v, %v", r, err)
	}
	if r, err := s.Register(ctx, schedule.Definition{Name: "hourly", Spec: "@hourly", Type: "reports.hourly"}); err != nil || r != schedule.Created {
		t.Fatalf("register = %v, %v", r, err)
	}
	before, err := s.Get(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if before.Spec != "0 30 6 * * *" || before.TimeZone != "Europe/Berlin" || before.Type != "reports.daily" ||
		before.Priority != framework.PriorityHigh || before.Target != "jetflow.task.high.reports.daily" || string(before.Payload) != `"v1"` {
		t.Fatalf("stored %+v", before)
	}
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err == nil {
		n := before.Next.In(berlin)
		if n.Hour() != 6 || n.Minute() != 30 || n.Second() != 0 || !n.After(time.Now()) || time.Until(n) > 24*time.Hour+time.Minute {
			t.Fatalf("next fire %s, want the next 06:30 in Berlin", n)
		}
	}
	daily.Payload = "v2"
	if r, err := s.Register(ctx, daily); err != nil || r != schedule.Updated {
		t.Fatalf("update = %v, %v", r, err)
	}
	after, err := s.Get(ctx, "report")
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Payload) != `"v2"` || after.Sequence <= before.Sequence {
		t.Fatalf("after update: %+v (before: seq %d)", after, before.Sequence)
	}
	list, err := s.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "hourly" || list[1].Name != "report" {
		t.Fatalf("List = %+v", list)
	}
	if n := list[0].Next; n.Minute() != 0 || n.Second() != 0 || !n.After(time.Now()) || time.Until(n) > time.Hour {
		t.Fatalf("hourly next fire %s", n)
	}
	if subs := cronSubjects(t, e.js); len(subs) != 2 || subs["jetflow.cron.report"] != 1 {
		t.Fatalf("cron subjects %v: an update must replace the schedule", subs)
	}
}

func TestScheduleValidation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ok := schedule.Definition{Name: "n", Spec: "@every 1m", Type: "a.b"}
	for _, tc := range []struct {
		name    string
		edit    func(*schedule.Definition)
		mention string
	}{
		{"empty name", func(s *schedule.Definition) { s.Name = "" }, "name"},
		{"dotted name", func(s *schedule.Definition) { s.Name = "a.b" }, "name"},
		{"bad type", func(s *schedule.Definition) { s.Type = "A" }, "task type"},
		{"bad priority", func(s *schedule.Definition) { s.Priority = 9 }, "priority"},
		{"empty spec", func(s *schedule.Definition) { s.Spec = "" }, "empty"},
		{"bad field", func(s *schedule.Definition) { s.Spec = "0 61 * * * *" }, "minute"},
		{"sub-second", func(s *schedule.Definition) { s.Spec = "@every 100ms" }, "1s"},
		{"unknown zone", func(s *schedule.Definition) { s.Spec = "@daily"; s.TimeZone = "Mars/Olympus" }, "unknown time zone"},
		{"local zone", func(s *schedule.Definition) { s.Spec = "@daily"; s.TimeZone = "Local" }, "ambiguous"},
		{"zone with every", func(s *schedule.Definition) { s.TimeZone = "Europe/Paris" }, "@every"},
		{"reserved header", func(s *schedule.Definition) { s.Headers = map[string]string{"Nats-Rollup": "all"} }, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := ok
			tc.edit(&sc)
			_, err := schedule.New(e.cl).Register(t.Context(), sc)
			if !errors.Is(err, schedule.ErrInvalid) {
				t.Fatalf("err = %v, want ErrInvalidSchedule", err)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Fatalf("err %q does not mention %q", err, tc.mention)
			}
		})
	}
	if subs := cronSubjects(t, e.js); len(subs) != 0 {
		t.Fatalf("invalid schedules were stored: %v", subs)
	}
	if _, err := schedule.New(e.cl).Get(t.Context(), "n"); !errors.Is(err, framework.ErrNotFound) {
		t.Fatalf("Get = %v, want ErrNotFound", err)
	}
}

func TestScheduleTopologyMissing(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	nc := testutil.Connect(t, srv, nats.Timeout(2*time.Second))
	cl, err := framework.NewClient(nc, framework.WithStateTracking(false))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	_, err = schedule.New(cl).Register(ctx, schedule.Definition{Name: "x", Spec: "@hourly", Type: "a"})
	if !errors.Is(err, framework.ErrTopologyMissing) {
		t.Fatalf("err = %v, want ErrTopologyMissing", err)
	}
}

func TestIdempotencyKeyOutsideHandler(t *testing.T) {
	t.Parallel()
	if k := framework.IdempotencyKey(context.Background()); k != "" {
		t.Fatalf("IdempotencyKey outside a handler = %q", k)
	}
}
