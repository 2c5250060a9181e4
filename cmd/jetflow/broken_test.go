package main

import (
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestBrokenSchedulesAreShown sends, as a producer allowed to publish tasks
// can, requests whose reply subjects are a repeating schedule's and a
// delayed task's schedule subject: the server stores its answers there and
// drops both schedules. cron ls, status and tasks ls say so, with what
// replaced them; registering the schedule again clears the note.
func TestBrokenSchedulesAreShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx, names := t.Context(), e.cl.Names()
	def := schedule.Definition{Name: "daily", Spec: "@daily", Type: "reports.build"}
	if _, err := schedule.New(e.cl).Register(ctx, def); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(time.Hour)
	delayed := taskmsg.DelayedSchedule(names.ScheduleSubject("victim"), names.FiredSubject(framework.PriorityNormal, "mail.send"), "victim", due, nil, []byte("1"))
	if _, err := e.cl.JetStream().PublishMsg(ctx, delayed); err != nil {
		t.Fatal(err)
	}
	if err := e.nc.PublishRequest(names.TaskSubject(framework.PriorityNormal, "x"), names.CronSubject("daily"), []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := e.nc.PublishRequest("$JS.API.STREAM.INFO."+names.TaskStream(), names.ScheduleSubject("victim"), nil); err != nil {
		t.Fatal(err)
	}
	var out string
	testutil.Wait(t, time.Minute, "status to report both broken", func() bool {
		out = e.ok(t, nil, "status").stdout
		return strings.Contains(out, "1 repeating schedule(s) BROKEN") && strings.Contains(out, "1 delayed task(s) BROKEN")
	})

	out = e.ok(t, nil, "cron", "ls").stdout
	if !strings.Contains(out, "BROKEN since") || !strings.Contains(out, `BROKEN daily: replaced by a message that is not a schedule (no Nats-Schedule header; 34 bytes: "{\"stream\":\"JETFLOW_TASKS\",\"seq\":1}")`) {
		t.Errorf("cron ls:\n%s", out)
	}
	var crons []scheduleView
	e.ok(t, &crons, "cron", "ls", "--json")
	if len(crons) != 1 || crons[0].Name != "daily" || crons[0].Broken == "" || crons[0].BrokenAt.IsZero() || !crons[0].NextFire.IsZero() {
		t.Errorf("cron ls --json: %+v", crons)
	}
	out = e.ok(t, nil, "tasks", "ls", "--state", "scheduled").stdout
	if !strings.Contains(out, "BROKEN victim: replaced by a message that is not a schedule") || !strings.Contains(out, "stream_info") {
		t.Errorf("tasks ls:\n%s", out)
	}
	if out = e.ok(t, nil, "tasks", "get", "victim").stdout; !strings.Contains(out, "cannot be restored") {
		t.Errorf("tasks get:\n%s", out)
	}

	if res, err := schedule.New(e.cl).Register(ctx, def); err != nil || res != schedule.Restored {
		t.Fatalf("register: %v %v", res, err)
	}
	if out = e.ok(t, nil, "cron", "ls").stdout; strings.Contains(out, "BROKEN") {
		t.Errorf("cron ls after register:\n%s", out)
	}
	if out = e.ok(t, nil, "status").stdout; strings.Contains(out, "repeating schedule(s) BROKEN") {
		t.Errorf("status after register:\n%s", out)
	}
}
