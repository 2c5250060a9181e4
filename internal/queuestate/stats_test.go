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
	cron := nats.NewMsg(names.CronSubject("nightly"))
	cron.Header.Set(jetstream.ScheduleHeader, "@daily")
	cron.Header.Set(jetstream.ScheduleTargetHeader, target)
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
