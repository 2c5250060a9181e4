package jetflowprom_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	jetflowprom "github.com/jetflow-io/jetflow/contrib/prometheus"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestBrokenSchedulesGauge sends, as a producer allowed to publish tasks
// can, a request whose reply subject is a registered cron schedule's, and
// another whose reply subject is a delayed task's schedule subject: the
// server stores its answers there and drops the schedules.
// jetflow_schedules_broken counts one of each kind, and the cron one goes
// back to 0 once the schedule is registered again.
func TestBrokenSchedulesGauge(t *testing.T) {
	t.Parallel()
	srv, cl := setup(t)
	ctx, names := t.Context(), cl.Names()
	def := schedule.Definition{Name: "daily", Spec: "@daily", Type: "reports.build"}
	if _, err := schedule.New(cl).Register(ctx, def); err != nil {
		t.Fatal(err)
	}
	qc, err := jetflowprom.NewQueueCollector(testutil.Connect(t, srv), jetflowprom.QueueCollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(qc)
	broken := func(kind string) float64 {
		v, ok := value(t, reg, "jetflow_schedules_broken", map[string]string{"kind": kind})
		if !ok {
			t.Fatalf("no jetflow_schedules_broken{kind=%q}", kind)
		}
		return v
	}
	if c, d := broken("cron"), broken("delayed"); c != 0 || d != 0 {
		t.Fatalf("before: cron %v delayed %v", c, d)
	}
	if err := cl.Conn().PublishRequest(names.TaskSubject(framework.PriorityNormal, "x"), names.CronSubject("daily"), []byte("hi")); err != nil {
		t.Fatal(err)
	}
	if err := cl.Conn().PublishRequest("$JS.API.STREAM.INFO."+names.TaskStream(), names.ScheduleSubject("victim"), nil); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "both counted broken", func() bool { return broken("cron") == 1 && broken("delayed") == 1 })
	if v, _ := value(t, reg, "jetflow_cron_schedules", nil); v != 0 {
		t.Errorf("jetflow_cron_schedules = %v with the only schedule broken, want 0", v)
	}
	if res, err := schedule.New(cl).Register(ctx, def); err != nil || res != schedule.Restored {
		t.Fatalf("register: %v %v", res, err)
	}
	if c := broken("cron"); c != 0 {
		t.Errorf("after register: cron %v, want 0", c)
	}
}
