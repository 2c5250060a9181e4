package jetflowprom_test

import (
	"context"
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetflow-io/jetflow/breaker"
	jetflowprom "github.com/jetflow-io/jetflow/contrib/prometheus"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/testutil"
)

// Every series the Grafana dashboard in docs/ queries is exported by the
// adapter or the queue collector.
func TestGrafanaDashboardUsesExportedSeries(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../docs/grafana/jetflow-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	reg := prometheus.NewRegistry()
	m, err := jetflowprom.New(reg, jetflowprom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Touch every labelled family once so that it is gathered.
	h := m.Hooks()
	task := &framework.Task{Type: "a.b"}
	h.Enqueued(context.Background(), framework.TaskInfo{Type: "a.b"})
	h.Finished(context.Background(), task, framework.Outcome{Action: framework.ActionAck})
	h.Event(context.Background(), breaker.StateChange{Dependency: "dep", From: breaker.StateClosed, To: breaker.StateOpen})
	srv, cl := setup(t)
	if _, err := topology.EnsureConsumer(t.Context(), cl.JetStream(), cl.Names(), topology.ConsumerSpec{TaskType: "a.b"}); err != nil {
		t.Fatal(err)
	}
	// A record in the dead-letter stream, for jetflow_dead_letters.
	if _, err := cl.JetStream().Publish(t.Context(), cl.Names().DLQSubject("a.b"), nil); err != nil {
		t.Fatal(err)
	}
	qc, err := jetflowprom.NewQueueCollector(testutil.Connect(t, srv), jetflowprom.QueueCollectorOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(qc)
	exported := map[string]bool{}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		exported[f.GetName()] = true
	}
	used := regexp.MustCompile(`jetflow_[a-z_]+`).FindAllString(string(data), -1)
	if len(used) == 0 {
		t.Fatal("the dashboard queries no jetflow series")
	}
	for _, u := range used {
		name := strings.TrimSuffix(u, "_bucket")
		if !exported[name] {
			t.Errorf("the dashboard queries %s, which nothing exports", u)
		}
	}
}
