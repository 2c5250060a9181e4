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
	added := make(chan breaker.State, 4)
	own := make(chan breaker.State, 4)
	w := e.worker(t, []breaker.Option{breaker.WithSettings("ledger", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour})},
		framework.WithHooks(framework.Hooks{Event: func(_ context.Context, ev any) { own <- ev.(breaker.StateChange).To }}))
	w.AddHooks(framework.Hooks{Event: func(_ context.Context, ev any) { added <- ev.(breaker.StateChange).To }})
	w.HandleFunc("ledger.post", func(ctx context.Context, task *framework.Task) error {
		return breaker.Call(ctx, "ledger", func(context.Context) error { return errors.New("down") })
	}, breaker.WithDependencies("ledger"))
	startWorker(t, w)
	e.Enqueue(t, "ledger.post", nil)
	if s := testutil.Recv(t, added, waitLong, "added hook"); s != breaker.StateOpen {
		t.Errorf("added hook got %v", s)
	}
	if s := testutil.Recv(t, own, waitLong, "WithHooks hook"); s != breaker.StateOpen {
		t.Errorf("WithHooks hook got %v", s)
	}
}
