package schedule_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestServerReplyOnCronSubjectIsReportedAndRestored reproduces issue 38's
// reply-subject injection: a producer's permitted request whose reply
// subject is a cron subject makes the server store its answer there (a
// publish acknowledgement, a STREAM.INFO response), and the server drops
// the schedule, whose own message stays in the stream before the answer.
// List and Get report the schedule broken, with the answer's first bytes;
// Register restores it (answering restored, never unchanged) and it fires
// again.
func TestServerReplyOnCronSubjectIsReportedAndRestored(t *testing.T) {
	t.Parallel()
	def := schedule.Definition{Name: "daily", Spec: "@every 1s", Type: "ticks.run"}
	e := registered(t, def)
	ctx, js, m, names := t.Context(), e.js, e.m, e.cl.Names()
	nc := e.cl.Conn()
	sched, err := js.Stream(ctx, names.ScheduleStream())
	if err != nil {
		t.Fatal(err)
	}
	held := func(subject string) uint64 {
		si, err := sched.Info(ctx, jetstream.WithSubjectFilter(subject))
		if err != nil {
			t.Fatal(err)
		}
		return si.State.Subjects[subject]
	}
	for _, attack := range []struct {
		name, subject string
		payload       []byte
		quoted        string // part of the reason
	}{
		{"publish acknowledgement", names.TaskSubject(framework.PriorityNormal, "x"), []byte("hi"), `"{\"stream\":\"JETFLOW_TASKS\",\"seq\":`},
		{"stream info response", "$JS.API.STREAM.INFO." + names.TaskStream(), nil, `io.nats.jetstream.api.v1.stream_info_r`},
	} {
		t.Run(attack.name, func(t *testing.T) {
			if err := nc.PublishRequest(attack.subject, e.info.Subject, attack.payload); err != nil {
				t.Fatal(err)
			}
			testutil.Wait(t, time.Minute, "the server's answer stored on the cron subject", func() bool { return held(e.info.Subject) >= 2 })

			list, err := m.List(ctx)
			if err != nil || len(list) != 1 {
				t.Fatalf("list: %+v %v", list, err)
			}
			got := list[0]
			if got.Name != "daily" || got.Spec != "@every 1s" || got.Type != "ticks.run" || got.BrokenAt.IsZero() || !got.Next.IsZero() ||
				!strings.Contains(got.Broken, "replaced by a message that is not a schedule") || !strings.Contains(got.Broken, attack.quoted) {
				t.Fatalf("listed %+v, want daily broken with %s in the reason and no next fire", got, attack.quoted)
			}
			if last := got.LastFire(time.Now().Add(time.Hour)); last.After(got.BrokenAt) {
				t.Errorf("last fire %v after the schedule broke at %v", last, got.BrokenAt)
			}
			if one, err := m.Get(ctx, "daily"); err != nil || one.Broken != got.Broken {
				t.Errorf("get: %+v %v, want broken as listed", one, err)
			}

			if res, err := m.Register(ctx, def); err != nil || res != schedule.Restored {
				t.Fatalf("register over the broken schedule: %v %v, want restored", res, err)
			}
			restored, err := m.Get(ctx, "daily")
			if err != nil || restored.Broken != "" || restored.Next.IsZero() {
				t.Fatalf("after register: %+v %v", restored, err)
			}
			if n := held(e.info.Subject); n != 1 {
				t.Errorf("the restored schedule's subject holds %d messages, want the schedule alone", n)
			}
			if res, err := m.Register(ctx, def); err != nil || res != schedule.Unchanged {
				t.Errorf("register again: %v %v, want unchanged", res, err)
			}
			waitTickAfter(t, js, names.TaskStream(), names.TaskSubject(framework.PriorityNormal, "ticks.run"), restored.Stored)
		})
	}
}

// TestReplyOnUnknownCronSubjectIsListed sends a server's answer to the cron
// subject of a name that holds no schedule (it was dropped and its message
// removed, or never stored): the answer alone is listed as that schedule,
// broken, and registering the name restores it.
func TestReplyOnUnknownCronSubjectIsListed(t *testing.T) {
	t.Parallel()
	e := registered(t, schedule.Definition{Name: "nightly", Spec: "0 30 2 * * *", Type: "reports.build"})
	ctx, m, names := t.Context(), e.m, e.cl.Names()
	if err := e.cl.Conn().PublishRequest(names.TaskSubject(framework.PriorityNormal, "x"), names.CronSubject("ghost"), nil); err != nil {
		t.Fatal(err)
	}
	var ghost schedule.Info
	testutil.Wait(t, time.Minute, "the answer listed", func() bool {
		list, err := m.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) == 2 {
			ghost = list[0]
		}
		return len(list) == 2
	})
	if ghost.Name != "ghost" || ghost.Subject != names.CronSubject("ghost") || ghost.Spec != "" || ghost.BrokenAt.IsZero() ||
		!strings.HasPrefix(ghost.Broken, "replaced by a message that is not a schedule") {
		t.Fatalf("listed %+v, want ghost broken", ghost)
	}
	if !ghost.LastFire(time.Now()).IsZero() || !ghost.Next.IsZero() {
		t.Errorf("a schedule never known has fire times: %+v", ghost)
	}
	def := schedule.Definition{Name: "ghost", Spec: "@hourly", Type: "reports.build"}
	if res, err := m.Register(ctx, def); err != nil || res != schedule.Restored {
		t.Fatalf("register ghost: %v %v, want restored", res, err)
	}
	if got, err := m.Get(ctx, "ghost"); err != nil || got.Broken != "" || got.Spec != "@hourly" {
		t.Errorf("ghost after register: %+v %v", got, err)
	}
}

// waitTickAfter waits for a task fired from a tick later than after on
// subject of the task stream.
func waitTickAfter(t *testing.T, js jetstream.JetStream, stream, subject string, after time.Time) {
	t.Helper()
	tasks, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, time.Minute, "a tick of the restored schedule", func() bool {
		last, err := tasks.GetLastMsgForSubject(t.Context(), subject)
		if err != nil {
			return false
		}
		f, ok := taskmsg.FireOf(last.Header, last.Time)
		return ok && f.Time.After(after)
	})
}

// TestKeepRestoresABrokenSchedule keeps a definition registered while a
// server's reply breaks its schedule: Keep restores it at its next round
// and logs it, and returns when its context ends.
func TestKeepRestoresABrokenSchedule(t *testing.T) {
	t.Parallel()
	def := schedule.Definition{Name: "daily", Spec: "@daily", Type: "reports.build"}
	e := registered(t, def)
	ctx, names := t.Context(), e.cl.Names()
	logs := make(chan slog.Record, 16)
	cl, err := framework.NewClient(e.cl.Conn(), framework.WithLogger(slog.New(chanHandler(logs))))
	if err != nil {
		t.Fatal(err)
	}
	m := schedule.New(cl)
	if err := m.Keep(ctx, 0, def); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("keep every 0: %v, want ErrInvalidOption", err)
	}
	if err := m.Keep(ctx, time.Second, def, schedule.Definition{Name: "bad", Spec: "0 61 * * * *", Type: "reports.build"}); !errors.Is(err, schedule.ErrInvalid) {
		t.Errorf("keep an invalid definition: %v, want ErrInvalid", err)
	}
	kctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Keep(kctx, 100*time.Millisecond, def) }()
	t.Cleanup(func() {
		stop()
		if err := testutil.Recv(t, done, time.Minute, "Keep to return"); err != nil {
			t.Errorf("keep: %v", err)
		}
	})

	// After a round, so that only a later one can restore it.
	for r := testutil.Recv(t, logs, time.Minute, "Keep's first round"); r.Level != slog.LevelDebug; {
		r = testutil.Recv(t, logs, time.Minute, "Keep's first round")
	}
	if err := e.cl.Conn().PublishRequest(names.TaskSubject(framework.PriorityNormal, "x"), e.info.Subject, []byte("hi")); err != nil {
		t.Fatal(err)
	}
	for {
		r := testutil.Recv(t, logs, time.Minute, "Keep to log the restore")
		if r.Level == slog.LevelWarn && strings.Contains(r.Message, "restored") {
			break
		}
	}
	got, err := m.Get(ctx, "daily")
	if err != nil || got.Broken != "" || got.Next.IsZero() {
		t.Errorf("after Keep restored it: %+v %v", got, err)
	}
}

// chanHandler is a slog.Handler sending every record to ch, dropping it
// when ch is full.
type chanHandler chan slog.Record

func (h chanHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h chanHandler) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r:
	default:
	}
	return nil
}
func (h chanHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h chanHandler) WithGroup(string) slog.Handler      { return h }

// TestBrokenScheduleIsReportedAfterRestart breaks a schedule with a
// server's reply and restarts the server on the same store: List still
// reports it broken (the server's own message before the reply is still
// there, and still not fired), and Register restores it so that it fires
// again.
func TestBrokenScheduleIsReportedAfterRestart(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testutil.WithListen())
	ctx, names := t.Context(), env.Client.Names()
	m := schedule.New(env.Client)
	def := schedule.Definition{Name: "daily", Spec: "@every 1s", Type: "ticks.run"}
	if res, err := m.Register(ctx, def); err != nil || res != schedule.Created {
		t.Fatalf("register: %v %v", res, err)
	}
	if err := env.Conn.PublishRequest(names.TaskSubject(framework.PriorityNormal, "x"), names.CronSubject("daily"), []byte("hi")); err != nil {
		t.Fatal(err)
	}
	broken := func() bool {
		list, err := m.List(ctx)
		return err == nil && len(list) == 1 && strings.HasPrefix(list[0].Broken, "replaced by a message that is not a schedule")
	}
	testutil.Wait(t, time.Minute, "the schedule broken", broken)
	testutil.RestartServer(t, env.Server)
	testutil.Wait(t, time.Minute, "the schedule still broken after the restart", broken)
	var res schedule.Result
	testutil.Wait(t, time.Minute, "a register after the restart", func() bool {
		var err error
		res, err = m.Register(ctx, def)
		return err == nil
	})
	if res != schedule.Restored {
		t.Fatalf("register after the restart: %v, want restored", res)
	}
	restored, err := m.Get(ctx, "daily")
	if err != nil || restored.Broken != "" {
		t.Fatalf("after register: %+v %v", restored, err)
	}
	waitTickAfter(t, env.JS, names.TaskStream(), names.TaskSubject(framework.PriorityNormal, "ticks.run"), restored.Stored)
}
