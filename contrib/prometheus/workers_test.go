package jetflowprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	jetflowprom "github.com/jetflow-io/jetflow/contrib/prometheus"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestWorkerCollector counts two running workers per queue they serve and
// their slots; a queue nobody serves has no series; a worker that shuts
// down is no longer counted.
func TestWorkerCollector(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	wc, err := jetflowprom.NewWorkerCollector(testutil.Connect(t, srv), jetflowprom.WorkerCollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(wc)
	start := func() *framework.Worker {
		w, err := framework.NewWorker(testutil.Connect(t, srv), framework.WithConcurrency(4))
		if err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("mail.send", func(context.Context, *framework.Task) error { return nil },
			framework.WithServedPriorities(framework.PriorityHigh))
		testutil.StartWorker(t, w)
		return w
	}
	w1 := start()
	start()
	live := func() float64 { v, _ := value(t, reg, "jetflow_workers_live", nil); return v }
	testutil.Wait(t, waitLong, "two workers live", func() bool { return live() == 2 })
	if v, ok := value(t, reg, "jetflow_workers", map[string]string{"type": "mail.send", "priority": "high"}); !ok || v != 2 {
		t.Errorf("jetflow_workers{mail.send,high} = %v (%v), want 2", v, ok)
	}
	if _, ok := value(t, reg, "jetflow_workers", map[string]string{"type": "mail.send", "priority": "low"}); ok {
		t.Error("a series for a priority nobody serves")
	}
	if v, _ := value(t, reg, "jetflow_worker_slots", nil); v != 8 {
		t.Errorf("jetflow_worker_slots = %v, want 8", v)
	}
	if v, _ := value(t, reg, "jetflow_workers_registry_up", nil); v != 1 {
		t.Errorf("jetflow_workers_registry_up = %v", v)
	}
	if err := w1.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if v := live(); v != 1 {
		t.Errorf("after a shutdown: %v live workers, want 1", v)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := promlint.NewWithMetricFamilies(fams).Lint()
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", problems, err)
	}
}

// TestUnservedPayloadVersionGauge: a worker whose handler takes payload
// versions 1 and 2 hands back a version 3 task; the collector exports
// jetflow_payload_version_unserved{type,version="3"} 1, and no series for
// the versions it accepts.
func TestUnservedPayloadVersionGauge(t *testing.T) {
	t.Parallel()
	srv, cl := setup(t)
	wc, err := jetflowprom.NewWorkerCollector(testutil.Connect(t, srv), jetflowprom.WorkerCollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(wc)
	w, err := framework.NewWorker(testutil.Connect(t, srv), framework.WithTimings(framework.Timings{RegistryInterval: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("invoice.render", func(context.Context, *framework.Task) error { return nil }, framework.AcceptVersions(1, 2))
	testutil.StartWorker(t, w)
	if _, err := cl.Enqueue(t.Context(), "invoice.render", "x", framework.PayloadVersion(3)); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "version 3 exported as unserved", func() bool {
		v, ok := value(t, reg, "jetflow_payload_version_unserved", map[string]string{"type": "invoice.render", "version": "3"})
		return ok && v == 1
	})
	if _, ok := value(t, reg, "jetflow_payload_version_unserved", map[string]string{"type": "invoice.render", "version": "2"}); ok {
		t.Error("a series for an accepted version")
	}
}
