package inspect_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestServerReplyOnScheduleSubjectsIsReportedBroken sends, as a producer
// allowed to publish tasks can, requests whose reply subject is a repeating
// schedule's subject and a delayed task's schedule subject: the server
// stores its answers there and drops both schedules. QueueStats and
// Overview count them broken (not as working schedules); ListTasks and
// FindTask show the delayed task broken with what replaced it, and
// ScheduledTasks no longer lists it as waiting.
func TestServerReplyOnScheduleSubjectsIsReportedBroken(t *testing.T) {
	t.Parallel()
	cl := setup(t)
	ctx, names := t.Context(), cl.Names()
	if _, err := schedule.New(cl).Register(ctx, schedule.Definition{Name: "daily", Spec: "@daily", Type: "reports.build"}); err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.New(cl).Register(ctx, schedule.Definition{Name: "hourly", Spec: "@hourly", Type: "reports.build"}); err != nil {
		t.Fatal(err)
	}
	// Two delayed tasks in their schedules, as the mover stores them.
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	for _, id := range []string{"victim", "kept"} {
		m := taskmsg.DelayedSchedule(names.ScheduleSubject(id), names.FiredSubject(framework.PriorityNormal, "mail.send"), id, due, nil, []byte("1"))
		if _, err := cl.JetStream().PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	op := inspect.New(cl)

	nc := cl.Conn()
	if err := nc.PublishRequest(names.TaskSubject(framework.PriorityNormal, "x"), names.CronSubject("daily"), []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := nc.PublishRequest("$JS.API.STREAM.INFO."+names.TaskStream(), names.ScheduleSubject("victim"), nil); err != nil {
		t.Fatal(err)
	}
	var st *inspect.QueueStats
	testutil.Wait(t, time.Minute, "both answers stored", func() bool {
		var err error
		st, err = op.QueueStats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Junk == 2
	})
	if st.BrokenCron != 1 || st.Cron != 1 || st.BrokenScheduled != 1 || st.Scheduled != 1 {
		t.Errorf("QueueStats: cron %d broken %d, scheduled %d broken %d; want 1, 1, 1, 1", st.Cron, st.BrokenCron, st.Scheduled, st.BrokenScheduled)
	}
	for _, q := range st.Queues {
		if q.Type == "mail.send" && q.Scheduled != 1 {
			t.Errorf("queue %+v: want 1 scheduled", q)
		}
	}
	ov, err := op.Overview(ctx)
	if err != nil || ov.BrokenCron != 1 || ov.BrokenScheduled != 1 || ov.Cron != 1 || ov.Scheduled != 1 {
		t.Errorf("Overview: %+v %v", ov, err)
	}

	recs, _, err := op.ScheduledTasks(ctx, inspect.ScheduledFilter{})
	if err != nil || len(recs) != 1 || recs[0].ID != "kept" {
		t.Errorf("ScheduledTasks = %+v, %v; want kept alone", recs, err)
	}
	tasks, err := op.ListTasks(ctx, inspect.TaskFilter{State: framework.StateScheduled})
	if err != nil || len(tasks) != 2 {
		t.Fatalf("ListTasks = %+v, %v", tasks, err)
	}
	victim := tasks[0]
	if victim.ID != "victim" || victim.Type != "mail.send" || !victim.DueAt.Equal(due) || tasks[1].Broken != "" ||
		!strings.Contains(victim.Broken, "not a schedule") || !strings.Contains(victim.Broken, "stream_info") ||
		!strings.Contains(victim.Broken, "cannot be restored") {
		t.Errorf("ListTasks: %+v, want victim broken first", tasks)
	}
	if typed, err := op.ListTasks(ctx, inspect.TaskFilter{State: framework.StateScheduled, Type: "other.type"}); err != nil || len(typed) != 0 {
		t.Errorf("ListTasks of another type = %+v, %v", typed, err)
	}
	d, err := op.FindTask(ctx, "victim")
	if err != nil || d.Broken != victim.Broken || d.Type != "mail.send" || d.Sequence != victim.Sequence {
		t.Errorf("FindTask: %+v %v, want it broken as listed", d, err)
	}
	if d, err := op.FindTask(ctx, "kept"); err != nil || d.Broken != "" {
		t.Errorf("FindTask kept: %+v %v", d, err)
	}
}
