package schedule_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestRegisterRestoresTamperedSchedule replaces a registered schedule, as
// another tool could, with one that fires another task on another spec but
// keeps the stored definition's fingerprint header: registering the
// definition again restores it instead of trusting the header.
func TestRegisterRestoresTamperedSchedule(t *testing.T) {
	t.Parallel()
	def := schedule.Definition{Name: "nightly", Spec: "0 30 2 * * *", Type: "reports.build", Payload: map[string]int{"days": 1},
		Headers: map[string]string{"Tenant": "acme"}}
	e := registered(t, def)
	ctx, js, cl, m, orig := t.Context(), e.js, e.cl, e.m, e.info
	names := cl.Names()
	for _, tamper := range []func(*nats.Msg){
		func(msg *nats.Msg) {
			msg.Header.Set(jetstream.ScheduleHeader, "@every 1s")
			msg.Header.Set(jetstream.ScheduleTargetHeader, names.FiredSubject(framework.PriorityCritical, "payments.refund"))
		},
		func(msg *nats.Msg) { msg.Data = []byte(`{"days":3650}`) },
		func(msg *nats.Msg) { msg.Header.Set("Tenant", "other") },
		func(msg *nats.Msg) { msg.Header.Set("X-Extra", "1") },
	} {
		msg := e.storedCopy(orig.Subject)
		tamper(msg)
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			t.Fatal(err)
		}
		if list, err := m.List(ctx); err != nil || len(list) != 1 || !strings.Contains(list[0].Broken, "not a schedule jetflow wrote") {
			t.Errorf("list of a tampered schedule: %+v %v, want it broken", list, err)
		}
		if res, err := m.Register(ctx, def); err != nil || res != schedule.Restored {
			t.Errorf("register over a tampered schedule: %v %v, want restored", res, err)
		}
		got, err := m.Get(ctx, "nightly")
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec != orig.Spec || got.Target != orig.Target || string(got.Payload) != string(orig.Payload) ||
			len(got.Headers) != 1 || got.Headers["Tenant"] != "acme" {
			t.Errorf("after register: spec %q target %q payload %s headers %v", got.Spec, got.Target, got.Payload, got.Headers)
		}
	}
	if res, err := m.Register(ctx, def); err != nil || res != schedule.Unchanged {
		t.Errorf("register again: %v %v, want unchanged", res, err)
	}
	// A schedule the server fired is still the one registered.
	tick := schedule.Definition{Name: "tick", Spec: "@every 1s", Type: "ticks.run"}
	if res, err := m.Register(ctx, tick); err != nil || res != schedule.Created {
		t.Fatalf("register tick: %v %v", res, err)
	}
	tasks, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, time.Minute, "a fired tick", func() bool {
		si, err := tasks.Info(ctx, jetstream.WithSubjectFilter(names.TaskSubject(framework.PriorityNormal, "ticks.run")))
		return err == nil && si.State.Msgs > 0
	})
	if res, err := m.Register(ctx, tick); err != nil || res != schedule.Unchanged {
		t.Errorf("register tick after it fired: %v %v, want unchanged", res, err)
	}
}

// TestRemoveTakesTheNamesListReports stores schedules on cron subjects
// Register would refuse (dotted, non-ASCII), as the nats CLI can: List
// reports them and Remove deletes each by the name List gave. A name that
// would match other subjects (a wildcard, an empty token, a space) is
// refused and deletes nothing.
func TestRemoveTakesTheNamesListReports(t *testing.T) {
	t.Parallel()
	e := registered(t, schedule.Definition{Name: "nightly", Spec: "0 30 2 * * *", Type: "reports.build"})
	ctx, js, cl, m := t.Context(), e.js, e.cl, e.m
	odd := []string{"legacy.report", "zürich", "a.b.c"}
	for _, name := range odd {
		if _, err := js.PublishMsg(ctx, e.storedCopy(cl.Names().CronSubject(name))); err != nil {
			t.Fatalf("store %s: %v", name, err)
		}
	}
	listed := func() []string {
		t.Helper()
		list, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range list {
			names = append(names, s.Name)
		}
		return names
	}
	if got, want := listed(), []string{"a.b.c", "legacy.report", "nightly", "zürich"}; !slices.Equal(got, want) {
		t.Fatalf("listed %q, want %q", got, want)
	}
	for _, bad := range []string{"", ">", "*", "a.*", "a.>", "legacy..report", ".nightly", "nightly.", "a b", "a\tb", "a\x00b", "\xff"} {
		if err := m.Remove(ctx, bad); !errors.Is(err, schedule.ErrInvalid) {
			t.Errorf("remove %q: %v, want ErrInvalid", bad, err)
		}
	}
	if got := listed(); len(got) != 4 {
		t.Fatalf("a refused remove deleted schedules: %q left", got)
	}
	for _, name := range odd {
		if err := m.Remove(ctx, name); err != nil {
			t.Errorf("remove %s: %v", name, err)
		}
		if err := m.Remove(ctx, name); !errors.Is(err, framework.ErrNotFound) {
			t.Errorf("remove %s again: %v, want ErrNotFound", name, err)
		}
	}
	if got := listed(); !slices.Equal(got, []string{"nightly"}) {
		t.Fatalf("after removing the odd names: %q", got)
	}
}

// scheduleEnv is a server with jetflow's topology and one registered
// schedule, as the tests that tamper with stored schedules start.
type scheduleEnv struct {
	js     jetstream.JetStream
	cl     *framework.Client
	m      *schedule.Manager
	info   schedule.Info           // the registered schedule
	stored *jetstream.RawStreamMsg // its stored message
}

// registered starts a server, ensures the topology and registers def.
func registered(t *testing.T, def schedule.Definition) *scheduleEnv {
	t.Helper()
	env := testenv.New(t)
	ctx, js, cl := t.Context(), env.JS, env.Client
	m := schedule.New(cl)
	if res, err := m.Register(ctx, def); err != nil || res != schedule.Created {
		t.Fatalf("register: %v %v", res, err)
	}
	info, err := m.Get(ctx, def.Name)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, cl.Names().ScheduleStream())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := stream.GetLastMsgForSubject(ctx, info.Subject)
	if err != nil {
		t.Fatal(err)
	}
	return &scheduleEnv{js: js, cl: cl, m: m, info: info, stored: stored}
}

// storedCopy returns the registered schedule's message (headers and
// payload) for subject, as another tool would publish it.
func (e *scheduleEnv) storedCopy(subject string) *nats.Msg {
	msg := nats.NewMsg(subject)
	for k, vs := range e.stored.Header {
		msg.Header[k] = append([]string(nil), vs...)
	}
	msg.Header.Del(jetstream.ExpectedLastSubjSeqHeader)
	msg.Data = e.stored.Data
	return msg
}
