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
// mover does while Stats runs: each task is counted once.
func TestStatsCountsTasksMovingDuringTheScan(t *testing.T) {
	e := testutil.NewEnv(t, streams.Config{})
	ctx := t.Context()
	names := streams.MustNames("")
	target := names.FiredSubject(streams.PriorityNormal, "moving")
	due := time.Now().Add(time.Hour)
	ids := []string{"m1", "m2", "m3"}
	for _, id := range ids {
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
	afterScheduleInfo = func() { move("m2"); move("m3") }
	defer func() { afterScheduleInfo = func() {} }()

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
	if snap.Scheduled != 3 || snap.Queues["moving"] == nil || snap.Queues["moving"].Scheduled != 3 || snap.Junk != 0 {
		t.Fatalf("scheduled %d, queue %+v, junk %d: want 3, 3, 0", snap.Scheduled, snap.Queues["moving"], snap.Junk)
	}
}
