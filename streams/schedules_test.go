package streams_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
)

// waitMsgs waits until stream holds n messages on filter.
func waitMsgs(t *testing.T, ctx context.Context, js jetstream.JetStream, stream, filter string, n uint64) {
	t.Helper()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(filter))
		if err == nil {
			var got uint64
			for _, c := range info.State.Subjects {
				got += c
			}
			if got == n {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s on %s: waited for %d messages: %v", stream, filter, n, ctx.Err())
		case <-tick.C:
		}
	}
}

func TestTaskStreamRefusesRollupsAndPurges(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	tasks := streamConfig(t, ctx, js, "JETFLOW_TASKS")
	if tasks.AllowMsgSchedules || tasks.AllowRollup || !tasks.DenyPurge {
		t.Fatalf("task stream: schedules %v rollup %v deny purge %v", tasks.AllowMsgSchedules, tasks.AllowRollup, tasks.DenyPurge)
	}
	for i := range 3 {
		if _, err := js.Publish(ctx, "jetflow.task.normal.t", []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, kind := range []string{jetstream.MsgRollupSubject, jetstream.MsgRollupAll} {
		m := &nats.Msg{Subject: "jetflow.task.normal.t", Header: nats.Header{jetstream.MsgRollup: {kind}}}
		if _, err := js.PublishMsg(ctx, m); err == nil {
			t.Errorf("Nats-Rollup: %s on a task subject was stored", kind)
		}
	}
	s, err := js.Stream(ctx, "JETFLOW_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject("jetflow.task.normal.t")); err == nil {
		t.Error("purge of a task subject succeeded")
	}
	waitMsgs(t, ctx, js, "JETFLOW_TASKS", "jetflow.task.normal.t", 3)
}

func TestFiredScheduleReachesTheTaskStream(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(200 * time.Millisecond).UTC().Format(time.RFC3339Nano)
	m := &nats.Msg{Subject: "jetflow.sched.a1", Data: []byte("body"), Header: nats.Header{
		jetstream.ScheduleHeader:       {"@at " + due},
		jetstream.ScheduleTargetHeader: {"jetflow.fired.high.mail.send"},
		jetstream.MsgIDHeader:          {"a1"},
		"Jetflow-Id":                   {"a1"},
		"X-Custom":                     {"kept"},
	}}
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	// A schedule may only target the schedule stream's own subjects: not a
	// work subject, not a workflow run, not a staging subject with no valid
	// priority.
	for _, target := range []string{"jetflow.task.high.mail.send", "jetflow.wf.run1", "jetflow.fired.urgent.x"} {
		bad := &nats.Msg{Subject: "jetflow.sched.b", Header: nats.Header{
			jetstream.ScheduleHeader: {"@at " + due}, jetstream.ScheduleTargetHeader: {target}}}
		if _, err := js.PublishMsg(ctx, bad); err == nil {
			t.Errorf("schedule aimed at %s was stored", target)
		}
	}
	waitMsgs(t, ctx, js, "JETFLOW_TASKS", "jetflow.task.high.mail.send", 1)
	got, err := js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET.JETFLOW_TASKS.jetflow.task.high.mail.send", nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(got.Data) != "body" || got.Header.Get("Jetflow-Id") != "a1" || got.Header.Get("X-Custom") != "kept" ||
		got.Header.Get("Nats-Scheduler") != "jetflow.sched.a1" {
		t.Errorf("fired task: %q %v", got.Data, got.Header)
	}
	// The staging copy left the (work-queue) schedule stream once stored.
	waitMsgs(t, ctx, js, "JETFLOW_SCHEDULES", ">", 0)
	// A duplicate of the schedule within the window is dropped.
	ack, err := js.PublishMsg(ctx, m)
	if err != nil || !ack.Duplicate {
		t.Errorf("second schedule with the same ID: %+v, %v", ack, err)
	}
}

// oldTaskStream is the task stream as Ensure created it before the schedule
// stream existed.
func oldTaskStream() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: "JETFLOW_TASKS",
		Subjects: []string{"jetflow.task.critical.>", "jetflow.task.high.>", "jetflow.task.normal.>", "jetflow.task.low.>",
			"jetflow.sched.>", "jetflow.cron.>", "jetflow.wf.>", "jetflow.ord.>"},
		Retention: jetstream.WorkQueuePolicy, Discard: jetstream.DiscardOld, Duplicates: streams.DefaultDuplicateWindow,
		AllowMsgSchedules: true, AllowMsgTTL: true, AllowAtomicPublish: true, AllowDirect: true,
	}
}

func TestMigrateTaskStreamFromTheOldLayout(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := js.CreateStream(ctx, oldTaskStream()); err != nil {
		t.Fatal(err)
	}
	// Ensure reports the old stream and leaves it alone.
	var drift *streams.DriftError
	if _, err := streams.Ensure(ctx, js, streams.Config{}); !errors.As(err, &drift) || len(drift.Drift) != 1 ||
		drift.Drift[0].Field != "AllowMsgSchedules" {
		t.Fatalf("Ensure on an old task stream: %v; want drift on AllowMsgSchedules only", err)
	}
	far := time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano)
	soon := time.Now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	pub := func(subj string, h nats.Header) {
		t.Helper()
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subj, Header: h, Data: []byte(subj)}); err != nil {
			t.Fatal(err)
		}
	}
	pub("jetflow.task.normal.t", nats.Header{jetstream.MsgIDHeader: {"now1"}})
	pub("jetflow.task.normal.t", nil)
	// A task with a message TTL, which the new task stream refuses: it is
	// restored without it (decision 040).
	pub("jetflow.task.normal.ttl", nats.Header{jetstream.MsgTTLHeader: {"3600"}})
	pub("jetflow.wf.run1", nats.Header{jetstream.MsgRollup: {jetstream.MsgRollupSubject}})
	pub("jetflow.sched.far", nats.Header{jetstream.ScheduleHeader: {"@at " + far},
		jetstream.ScheduleTargetHeader: {"jetflow.task.normal.t"}, "Jetflow-Id": {"far"}, jetstream.MsgIDHeader: {"far"}})
	pub("jetflow.sched.soon", nats.Header{jetstream.ScheduleHeader: {"@at " + soon},
		jetstream.ScheduleTargetHeader: {"jetflow.task.low.t"}, "Jetflow-Id": {"soon"}, jetstream.MsgIDHeader: {"soon"}})
	pub("jetflow.cron.nightly", nats.Header{jetstream.ScheduleHeader: {"0 0 3 * * *"},
		jetstream.ScheduleTargetHeader: {"jetflow.task.normal.t"}, "Jetflow-Schedule": {"nightly"}})

	mig, err := streams.MigrateTaskStream(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if mig.Copied != 7 || mig.Restored != 7 {
		t.Errorf("migration %+v, want 7 copied and restored", mig)
	}
	tasks := streamConfig(t, ctx, js, "JETFLOW_TASKS")
	if tasks.AllowMsgSchedules || tasks.AllowRollup || !tasks.DenyPurge || slices.Contains(tasks.Subjects, "jetflow.sched.>") {
		t.Errorf("task stream after migration: %+v", tasks)
	}
	if _, err := js.Stream(ctx, "JETFLOW_MIGRATION"); !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Errorf("migration stream left: %v", err)
	}
	waitMsgs(t, ctx, js, "JETFLOW_SCHEDULES", "jetflow.sched.far", 1)
	waitMsgs(t, ctx, js, "JETFLOW_SCHEDULES", "jetflow.cron.nightly", 1)
	waitMsgs(t, ctx, js, "JETFLOW_RUNS", "jetflow.wf.run1", 1)
	waitMsgs(t, ctx, js, "JETFLOW_TASKS", "jetflow.task.normal.t", 2)
	get := func(stream, subj string) *nats.Msg {
		t.Helper()
		m, err := js.Conn().RequestWithContext(ctx, "$JS.API.DIRECT.GET."+stream+"."+subj, nil)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if c := get("JETFLOW_SCHEDULES", "jetflow.cron.nightly"); c.Header.Get(jetstream.ScheduleTargetHeader) != "jetflow.fired.normal.t" ||
		c.Header.Get("Jetflow-Schedule") != "nightly" || c.Header.Get(jetstream.ScheduleHeader) != "0 0 3 * * *" {
		t.Errorf("migrated cron schedule: %v", c.Header)
	}
	// The moved one-shot schedule fires through the sourcing.
	waitMsgs(t, ctx, js, "JETFLOW_TASKS", "jetflow.task.low.t", 1)
	if f := get("JETFLOW_TASKS", "jetflow.task.low.t"); f.Header.Get("Jetflow-Id") != "soon" {
		t.Errorf("fired migrated task: %v", f.Header)
	}
	// Ensure is now clean, and a second migration changes nothing.
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	if mig, err := streams.MigrateTaskStream(ctx, js, streams.Config{}); err != nil || mig.Copied != 0 || mig.Restored != 0 {
		t.Fatalf("second migration: %+v, %v", mig, err)
	}
}
