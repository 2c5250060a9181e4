package ratelimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/ratelimit"
)

// A limited type on a worker without rate limits would run unlimited:
// Start refuses it, naming Install.
func TestWithLimitNeedsInstall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	noop := func(context.Context, *framework.Task) error { return nil }

	w := e.Worker(t)
	w.Register("needs.limits", framework.HandlerFunc(noop), ratelimit.WithLimit(ratelimit.Limit{Limit: 10}))
	err := w.Start(t.Context())
	if !errors.Is(err, framework.ErrInvalidOption) || !strings.Contains(err.Error(), "ratelimit.Install") {
		t.Fatalf("Start without ratelimit.Install = %v, want ErrInvalidOption naming ratelimit.Install", err)
	}

	w = e.Worker(t)
	w.Register("needs.key.limits", framework.HandlerFunc(noop), ratelimit.WithKeyLimit(ratelimit.Limit{Limit: 10}))
	if err := w.Start(t.Context()); !errors.Is(err, framework.ErrInvalidOption) || !strings.Contains(err.Error(), "ratelimit.WithKeyLimit needs ratelimit.Install") {
		t.Fatalf("Start with a per-key limit without ratelimit.Install = %v", err)
	}

	w = e.worker(t)
	w.Register("needs.limits", framework.HandlerFunc(noop), ratelimit.WithLimit(ratelimit.Limit{Limit: 10}))
	w.Register("needs.key.limits", framework.HandlerFunc(noop), ratelimit.WithKeyLimit(ratelimit.Limit{Limit: 10}))
	startWorker(t, w)
}
