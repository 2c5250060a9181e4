package queuestate

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestStatsCountsTasksMovingDuringTheScan stores the schedules of delayed
// tasks between the schedule stream's count and its scan, as the delay
// mover does while Stats runs: each task is counted once. A junk message
// stored on a repeating schedule's subject after the cron count is not
// taken off it.
func TestStatsCountsTasksMovingDuringTheScan(t *testing.T) {
	e := testutil.NewEnv(t, streams.Config{})
	ctx := t.Context()
	names := streams.MustNames("")
	target := names.FiredSubject(streams.PriorityNormal, "moving")
	due := time.Now().Add(time.Hour)
	for _, id := range []string{"m1", "m2", "m3"} {
		m := nats.NewMsg(names.DelaySubject(id))
		m.Header.Set(taskmsg.HeaderScheduleTarget, target)
		if _, err := e.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	// A mover stores the schedule before it removes the delayed task.
	move := func(id string) {
		t.Helper()
		s := taskmsg.DelayedSchedule(names.ScheduleSubject(id), target, id, due, nil, nil)
		if _, err := e.JS.PublishMsg(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	move("m1")
	// One repeating schedule, so that the cron count is scanned.
	cron, _ := taskmsg.BuildSchedule(taskmsg.Schedule{Name: "nightly", Subject: names.CronSubject("nightly"), Spec: "@daily", Target: target})
	if _, err := e.JS.PublishMsg(ctx, cron); err != nil {
		t.Fatal(err)
	}
	afterCount = func(filter string) {
		switch filter {
		case names.ScheduleSubject(">"):
			move("m2")
			move("m3")
		case names.CronSubject(">"):
			if _, err := e.JS.Publish(ctx, names.CronSubject("junk"), nil); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { afterCount = func(string) {} }()

	stream, err := e.JS.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Stats(ctx, e.Conn, e.JS, stream, StatsConfig[string]{
		TaskStream: names.TaskStream(), ScheduleStream: names.ScheduleStream(), DLQStream: names.DLQStream(),
		Schedules: names.ScheduleSubject(">"), Crons: names.CronSubject(">"), DLQPrefix: names.DLQSubject(""),
		DelayStream: names.DelayStream(), Delays: names.DelaySubject(">"),
		MaxScheduled: 100, MaxJunk: 10,
		QueueOf: func(*jetstream.ConsumerInfo) (string, bool) { return "", false },
		TargetOf: func(subject string) (string, bool) {
			_, typ, err := names.ParseScheduleTarget(subject)
			return typ, err == nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Scheduled != 3 || snap.Queues["moving"] == nil || snap.Queues["moving"].Scheduled != 3 || snap.Cron != 1 || snap.Junk != 0 {
		t.Fatalf("scheduled %d, queue %+v, cron %d, junk %d: want 3, 3, 1, 0",
			snap.Scheduled, snap.Queues["moving"], snap.Cron, snap.Junk)
	}
}

// TestStatsCountsBrokenSchedules stores, as a server's reply to a request
// whose reply subject a producer chose would, plain messages after
// schedules on their subjects, and alone on others: each subject whose last
// message is not a schedule jetflow wrote counts as broken, once, and not
// as a delayed task or a repeating schedule; a schedule changed by another
// tool counts as a broken repeating schedule.
func TestStatsCountsBrokenSchedules(t *testing.T) {
	t.Parallel()
	e := testutil.NewEnv(t, streams.Config{})
	ctx := t.Context()
	names := streams.MustNames("")
	target := names.FiredSubject(streams.PriorityNormal, "kept")
	due := time.Now().Add(time.Hour)
	publish := func(m *nats.Msg) {
		t.Helper()
		if _, err := e.JS.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	reply := func(subject string) {
		t.Helper()
		publish(&nats.Msg{Subject: subject, Data: []byte(`{"stream":"JETFLOW_TASKS","seq":1}`)})
	}
	for _, id := range []string{"ok1", "ok2", "dropped"} {
		publish(taskmsg.DelayedSchedule(names.ScheduleSubject(id), target, id, due, nil, nil))
	}
	reply(names.ScheduleSubject("dropped"))
	reply(names.ScheduleSubject("dropped"))
	reply(names.ScheduleSubject("alone"))
	cron := func(name string) *nats.Msg {
		m, _ := taskmsg.BuildSchedule(taskmsg.Schedule{Name: name, Subject: names.CronSubject(name), Spec: "@daily", Target: target})
		return m
	}
	publish(cron("daily"))
	publish(cron("dropped"))
	reply(names.CronSubject("dropped"))
	reply(names.CronSubject("ghost"))
	changed := cron("changed")
	changed.Data = []byte("other payload")
	publish(changed)

	stream, err := e.JS.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	snap, err := Stats(ctx, e.Conn, e.JS, stream, StatsConfig[string]{
		TaskStream: names.TaskStream(), ScheduleStream: names.ScheduleStream(), DLQStream: names.DLQStream(),
		Schedules: names.ScheduleSubject(">"), Crons: names.CronSubject(">"), DLQPrefix: names.DLQSubject(""),
		DelayStream: names.DelayStream(), Delays: names.DelaySubject(">"),
		MaxScheduled: 100, MaxJunk: 10,
		QueueOf: func(*jetstream.ConsumerInfo) (string, bool) { return "", false },
		TargetOf: func(subject string) (string, bool) {
			_, typ, err := names.ParseScheduleTarget(subject)
			return typ, err == nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if snap.Scheduled != 2 || snap.Queues["kept"] == nil || snap.Queues["kept"].Scheduled != 2 || snap.BrokenScheduled != 2 {
		t.Errorf("delayed: scheduled %d, queue %+v, broken %d; want 2, 2, 2", snap.Scheduled, snap.Queues["kept"], snap.BrokenScheduled)
	}
	if snap.Cron != 1 || snap.BrokenCron != 3 {
		t.Errorf("cron %d, broken %d; want 1, 3", snap.Cron, snap.BrokenCron)
	}
	if snap.Junk != 5 {
		t.Errorf("junk %d, want every plain message: 5", snap.Junk)
	}
}
