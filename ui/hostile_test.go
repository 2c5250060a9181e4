package ui_test

import (
	"net/http"
	"testing"

	"github.com/jetflow-io/jetflow/ui"
)

// TestMetricsSurviveHostileBreakerKey stores a breaker record under a key
// that nats.go cannot read, as another tool could publish it: the breaker
// list and the metrics endpoint keep working and show the valid record.
func TestMetricsSurviveHostileBreakerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	ctx := t.Context()
	rec := []byte(`{"state":"open","since":"2026-01-01T00:00:00Z","worker":"w1"}`)
	for _, key := range []string{"bank", "bad@key"} {
		if _, err := e.cl.JetStream().Publish(ctx, "$KV."+e.cl.Names().BreakerBucket()+"."+key, rec); err != nil {
			t.Fatal(err)
		}
	}
	var out struct {
		Breakers []ui.Breaker `json:"breakers"`
	}
	if status := e.do(t, "GET", "api/breakers", "", false, &out); status != http.StatusOK || len(out.Breakers) != 1 || out.Breakers[0].Dependency != "bank" {
		t.Errorf("api/breakers: %d %+v", status, out.Breakers)
	}
	res, err := http.Get(e.web.URL + "/ops/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	m := parseMetrics(t, res.Body)
	if m[ui.MetricInspectUp] != 1 || m[ui.MetricBreakerState+`{dependency="bank",state="open"}`] != 1 {
		t.Errorf("metrics: up %v, bank open %v", m[ui.MetricInspectUp], m[ui.MetricBreakerState+`{dependency="bank",state="open"}`])
	}
}
