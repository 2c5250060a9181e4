package jetflowprom_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	jetflowprom "github.com/jetflow-io/jetflow/contrib/prometheus"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestHooksBesideTheUsers gives a client the adapter's hooks and a set of
// the user's, in both orders: the enqueued series and the user's hook both
// see the task (issue 37: the second WithHooks used to replace the first,
// and the outcome="enqueued" series vanished).
func TestHooksBesideTheUsers(t *testing.T) {
	t.Parallel()
	srv, _ := setup(t)
	reg := prometheus.NewRegistry()
	m, err := jetflowprom.New(reg, jetflowprom.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var mine atomic.Int32
	user := framework.WithHooks(framework.Hooks{Enqueued: func(context.Context, framework.TaskInfo) { mine.Add(1) }})
	for _, opts := range [][]framework.ClientOption{
		{framework.WithHooks(m.Hooks()), user},
		{user, framework.WithHooks(m.Hooks())},
	} {
		cl, err := framework.NewClient(testutil.Connect(t, srv), opts...)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cl.Enqueue(t.Context(), "compose.task", nil); err != nil {
			t.Fatal(err)
		}
	}
	labels := map[string]string{"type": "compose.task", "outcome": jetflowprom.OutcomeEnqueued}
	if v, _ := value(t, reg, "jetflow_tasks_total", labels); v != 2 {
		t.Errorf("jetflow_tasks_total{outcome=enqueued} = %v, want 2", v)
	}
	if n := mine.Load(); n != 2 {
		t.Errorf("the user's Enqueued hook ran %d times, want 2", n)
	}
}
