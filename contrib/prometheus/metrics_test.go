package jetflowprom_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/jetflow-io/jetflow/breaker"
	jetflowprom "github.com/jetflow-io/jetflow/contrib/prometheus"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/ui"
)

const waitLong = 20 * time.Second

func setup(t *testing.T) (*testutil.Server, *framework.Client) {
	t.Helper()
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return srv, cl
}

// value returns the value of the series name{labels} in reg, and whether it exists.
func value(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return metricValue(m), true
		}
	}
	return 0, false
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

func TestWorkerAndClientMetrics(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	reg := prometheus.NewRegistry()
	m, err := jetflowprom.New(reg, jetflowprom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jetflowprom.New(reg, jetflowprom.Options{}); err == nil {
		t.Error("second registration on one registry accepted")
	}
	nc := testutil.Connect(t, srv)
	cl, err := framework.NewClient(nc, framework.WithHooks(m.Hooks()))
	if err != nil {
		t.Fatal(err)
	}
	w, err := framework.NewWorker(testutil.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := breaker.Install(w, breaker.WithSettings("bank", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour})); err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var flaky atomic.Int32
	w.HandleFunc("ok.task", func(ctx context.Context, task *framework.Task) error { return nil })
	w.HandleFunc("flaky.task", func(ctx context.Context, task *framework.Task) error {
		if flaky.Add(1) == 1 {
			return errors.New("first attempt fails")
		}
		return nil
	}, framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}))
	w.HandleFunc("bad.task", func(ctx context.Context, task *framework.Task) error {
		return framework.Permanent(errors.New("no"))
	})
	w.HandleFunc("slow.task", func(ctx context.Context, task *framework.Task) error {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})
	w.HandleFunc("bank.task", func(ctx context.Context, task *framework.Task) error {
		return breaker.Call(ctx, "bank", func(context.Context) error { return errors.New("down") })
	}, breaker.WithDependencies("bank"), framework.WithMaxAttempts(1))
	m.Instrument(w)
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	ctx := t.Context()
	for _, typ := range []string{"ok.task", "ok.task", "flaky.task", "bad.task", "slow.task", "bank.task"} {
		if _, err := cl.Enqueue(ctx, typ, nil, framework.WithPriority(framework.PriorityHigh)); err != nil {
			t.Fatal(err)
		}
	}
	series := func(typ, outcome string) float64 {
		v, _ := value(t, reg, "jetflow_tasks_total", map[string]string{"type": typ, "priority": "high", "outcome": outcome})
		return v
	}
	testutil.Wait(t, waitLong, "outcomes counted", func() bool {
		return series("ok.task", "succeeded") == 2 && series("flaky.task", "succeeded") == 1 &&
			series("bad.task", "failed") == 1 && series("slow.task", "started") == 1 && series("bank.task", "started") == 1
	})
	checks := []struct {
		typ, outcome string
		want         float64
	}{
		{"ok.task", "enqueued", 2}, {"ok.task", "started", 2}, {"ok.task", "failed", 0},
		{"flaky.task", "started", 2}, {"flaky.task", "retried", 1},
		{"bad.task", "dead_lettered", 1}, {"bad.task", "retried", 0},
	}
	for _, c := range checks {
		if got := series(c.typ, c.outcome); got != c.want {
			t.Errorf("%s %s = %v, want %v", c.typ, c.outcome, got, c.want)
		}
	}
	if n, _ := value(t, reg, "jetflow_task_duration_seconds", map[string]string{"type": "ok.task", "outcome": "succeeded"}); n != 2 {
		t.Errorf("duration observations %v, want 2", n)
	}
	// slow.task runs; bank.task is held in process while its breaker is
	// open (no attempt spent): both count as running.
	if n, _ := value(t, reg, "jetflow_tasks_running", nil); n != 2 {
		t.Errorf("running %v, want 2 (slow.task and the held bank.task)", n)
	}
	testutil.Wait(t, waitLong, "breaker open", func() bool {
		v, _ := value(t, reg, "jetflow_breaker_state", map[string]string{"dependency": "bank", "state": "open"})
		return v == 1
	})
	if v, _ := value(t, reg, "jetflow_breaker_state", map[string]string{"dependency": "bank", "state": "closed"}); v != 0 {
		t.Errorf("closed state %v", v)
	}
	close(release)
	testutil.Wait(t, waitLong, "slow task done", func() bool {
		n, _ := value(t, reg, "jetflow_tasks_running", nil)
		return n == 1 && series("slow.task", "succeeded") == 1
	})
	if err := promtest.GatherAndCompare(reg, strings.NewReader(""), "jetflow_tasks_total"); err == nil {
		t.Error("compare with nothing matched: the helper is broken")
	}
}

func TestQueueCollector(t *testing.T) {
	t.Parallel()
	srv, cl := setup(t)
	ctx := t.Context()
	if _, err := topology.EnsureConsumer(ctx, cl.JetStream(), cl.Names(), topology.ConsumerSpec{TaskType: "q.a"}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := cl.Enqueue(ctx, "q.a", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cl.Enqueue(ctx, "q.a", nil, framework.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := inspect.New(cl).PauseQueue(ctx, "q.a", framework.PriorityNormal, time.Time{}); err != nil {
		t.Fatal(err)
	}
	qc, err := jetflowprom.NewQueueCollector(testutil.Connect(t, srv), jetflowprom.QueueCollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(qc)
	if n, err := promtest.GatherAndCount(reg); err != nil || n == 0 {
		t.Fatalf("gather: %d %v", n, err)
	}
	l := map[string]string{"type": "q.a", "priority": "normal"}
	for name, want := range map[string]float64{
		ui.MetricInspectUp: 1, ui.MetricQueueWaiting: 3, ui.MetricQueueScheduled: 1, ui.MetricQueuePaused: 1,
		ui.MetricQueuePendingAcks: 0, ui.MetricScheduledTasks: 1, ui.MetricCronSchedules: 0,
	} {
		labels := l
		if name == ui.MetricInspectUp || name == ui.MetricScheduledTasks || name == ui.MetricCronSchedules {
			labels = nil
		}
		if got, ok := value(t, reg, name, labels); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if age, _ := value(t, reg, ui.MetricQueueOldestAge, l); age <= 0 {
		t.Errorf("oldest age %v", age)
	}
	// The collector exports exactly the dashboard's queue series names.
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.GetName())
	}
	sort.Strings(names)
	want := []string{ui.MetricCronSchedules, ui.MetricInspectUp, ui.MetricQueueDelivered, ui.MetricQueueOldestAge,
		ui.MetricQueuePaused, ui.MetricQueuePendingAcks, ui.MetricQueuePullers, ui.MetricQueueRedelivered,
		ui.MetricQueueScheduled, ui.MetricQueueWaiting, ui.MetricScheduledTasks, "jetflow_schedules_broken"}
	sort.Strings(want)
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("series %v, want %v", names, want)
	}

	// Without topology: up is 0, and the scrape still works.
	bare := testutil.RunServer(t)
	qc2, err := jetflowprom.NewQueueCollector(testutil.Connect(t, bare), jetflowprom.QueueCollectorOptions{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	reg2 := prometheus.NewRegistry()
	reg2.MustRegister(qc2)
	if up, ok := value(t, reg2, ui.MetricInspectUp, nil); !ok || up != 0 {
		t.Errorf("up without topology %v %v", up, ok)
	}
}
