package jetflowprom_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	jetflowprom "github.com/jetflow-io/jetflow/contrib/prometheus"
	"github.com/jetflow-io/jetflow/debounce"
	"github.com/jetflow-io/jetflow/fairness"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestKeyCollector bounds the series per type: with TopKeys 2, the two
// busiest keys (debounced, then by name) have series of their own and the
// other three add up under key="other".
func TestKeyCollector(t *testing.T) {
	t.Parallel()
	srv, cl := setup(t)
	kc, err := jetflowprom.NewKeyCollector(testutil.Connect(t, srv), jetflowprom.KeyCollectorOptions{TopKeys: 2})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(kc)
	for i := range 3 {
		if err := keylimit.Set(t.Context(), cl, "tenant.sync", fmt.Sprintf("quiet-%d", i), 4); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"busy-a", "busy-b", "busy-c"} {
		if _, err := debounce.Enqueue(t.Context(), cl, "tenant.sync", 1, debounce.Options{Key: key, Window: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	for _, key := range []string{"busy-a", "busy-b"} {
		if v, ok := value(t, reg, "jetflow_key_debounced", map[string]string{"type": "tenant.sync", "key": key}); !ok || v != 1 {
			t.Errorf("jetflow_key_debounced{%s} = %v (%v), want 1", key, v, ok)
		}
	}
	if v, ok := value(t, reg, "jetflow_key_debounced", map[string]string{"type": "tenant.sync", "key": "other"}); !ok || v != 1 {
		t.Errorf("jetflow_key_debounced{other} = %v (%v), want 1 (busy-c)", v, ok)
	}
	if _, ok := value(t, reg, "jetflow_key_running", map[string]string{"type": "tenant.sync", "key": "quiet-0"}); ok {
		t.Error("a series of its own for a key past the top 2")
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "jetflow_key_running" && len(f.GetMetric()) != 3 {
			t.Errorf("jetflow_key_running has %d series, want 3 (two keys and other)", len(f.GetMetric()))
		}
	}
	// Fair tasks of a type no worker serves stay staged: their key
	// becomes the type's busiest.
	for range 3 {
		if _, err := fairness.Enqueue(t.Context(), cl, "tenant.report", nil, "hooli"); err != nil {
			t.Fatal(err)
		}
	}
	if v, ok := value(t, reg, "jetflow_key_staged", map[string]string{"type": "tenant.report", "key": "hooli"}); !ok || v != 3 {
		t.Errorf("jetflow_key_staged{hooli} = %v (%v), want 3", v, ok)
	}
	if v, _ := value(t, reg, "jetflow_keys_up", nil); v != 1 {
		t.Errorf("jetflow_keys_up = %v", v)
	}
}
