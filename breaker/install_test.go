package breaker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
)

// A type that declares dependencies on a worker without breakers would
// never be paused by an open breaker: Start refuses it, naming Install.
func TestWithDependenciesNeedsInstall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	noop := func(context.Context, *framework.Task) error { return nil }

	w := e.Worker(t)
	w.Register("needs.breakers", framework.HandlerFunc(noop), breaker.WithDependencies("payments"))
	err := w.Start(t.Context())
	if !errors.Is(err, framework.ErrInvalidOption) || !strings.Contains(err.Error(), "breaker.Install") {
		t.Fatalf("Start without breaker.Install = %v, want ErrInvalidOption naming breaker.Install", err)
	}

	w = e.worker(t, nil)
	w.Register("needs.breakers", framework.HandlerFunc(noop), breaker.WithDependencies("payments"))
	startWorker(t, w)
}
