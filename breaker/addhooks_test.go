package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/testutil"
)

// Hooks added with AddHooks (metrics and tracing adapters) hear breaker
// changes too, beside the WithHooks ones.
func TestAddedHooksHearBreakerChanges(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	added := make(chan framework.BreakerState, 4)
	own := make(chan framework.BreakerState, 4)
	w := e.worker(t, []breaker.Option{breaker.WithSettings("ledger", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour})},
		framework.WithHooks(framework.Hooks{BreakerStateChanged: func(_ context.Context, dep string, _, to framework.BreakerState) { own <- to }}))
	w.AddHooks(framework.Hooks{BreakerStateChanged: func(_ context.Context, dep string, _, to framework.BreakerState) { added <- to }})
	w.HandleFunc("ledger.post", func(ctx context.Context, task *framework.Task) error {
		return breaker.Call(ctx, "ledger", func(context.Context) error { return errors.New("down") })
	}, breaker.WithDependencies("ledger"))
	startWorker(t, w)
	e.Enqueue(t, "ledger.post", nil)
	if s := testutil.Recv(t, added, waitLong, "added hook"); s != framework.BreakerOpen {
		t.Errorf("added hook got %v", s)
	}
	if s := testutil.Recv(t, own, waitLong, "WithHooks hook"); s != framework.BreakerOpen {
		t.Errorf("WithHooks hook got %v", s)
	}
}
