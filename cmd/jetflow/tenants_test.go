package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/debounce"
	"github.com/jetflow-io/jetflow/fairness"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/testutil"
)

// jetflow keys shows, per task key, the tasks running under keylimit, the
// tasks staged for fair shares, a key's override, its per-key rate limit's use and its debounced burst,
// the busiest first, and filters by type.
func TestKeysCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	running := make(chan struct{}, 2)
	e.worker(t, func(w *framework.Worker) {
		keylimit.Install(w)
		if err := ratelimit.Install(w); err != nil {
			t.Fatal(err)
		}
		if err := debounce.Install(w); err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("tenant.sync", func(ctx context.Context, _ *framework.Task) error {
			running <- struct{}{}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}, keylimit.PerKey(2), ratelimit.WithKeyLimit(ratelimit.Limit{Limit: 50}))
		w.HandleFunc("tenant.index", func(context.Context, *framework.Task) error { return nil })
	}, framework.WithConcurrency(4))
	defer close(release)
	for range 2 {
		if _, err := e.cl.Enqueue(t.Context(), "tenant.sync", nil, framework.WithKey("acme corp")); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		testutil.Recv(t, running, 20*time.Second, "a task of acme corp running")
	}
	if err := keylimit.Set(t.Context(), e.cl, "tenant.sync", "globex", 5); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := debounce.Enqueue(t.Context(), e.cl, "tenant.index", 1, debounce.Options{Key: "initech", Window: time.Hour, MaxWait: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	// Fair tasks of a type no worker takes fair shares of stay staged.
	for range 4 {
		if _, err := fairness.Enqueue(t.Context(), e.cl, "tenant.report", nil, "hooli"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fairness.Enqueue(t.Context(), e.cl, "tenant.report", nil, "hooli", framework.WithPriority(framework.PriorityHigh)); err != nil {
		t.Fatal(err)
	}
	var keys []inspect.KeyInfo
	e.ok(t, &keys, "keys", "--json")
	if len(keys) != 4 {
		t.Fatalf("keys %+v, want acme corp, hooli, globex and initech", keys)
	}
	if k := keys[1]; k.Key != "hooli" || k.Type != "tenant.report" || k.Staged != 5 {
		t.Errorf("second key %+v, want hooli with 5 tasks staged (two priorities)", k)
	}
	keys = slices.Delete(keys, 1, 2)
	if k := keys[0]; k.Key != "acme corp" || k.Type != "tenant.sync" || k.Running != 2 || k.RatePerSecond != 50 || k.RateLastSecond+1 < 1 {
		t.Errorf("first key %+v, want acme corp with 2 running and its rate", k)
	}
	if k := keys[1]; k.Key != "initech" || k.DebouncedEnqueues != 3 || k.DebouncedSince.IsZero() {
		t.Errorf("second key %+v, want initech debounced over 3 enqueues", k)
	}
	if k := keys[2]; k.Key != "globex" || k.Limit != 5 || k.Running != 0 {
		t.Errorf("third key %+v, want globex with its override of 5", k)
	}
	e.ok(t, &keys, "keys", "--type", "tenant.index", "--json")
	if len(keys) != 1 || keys[0].Key != "initech" {
		t.Errorf("keys of tenant.index %+v", keys)
	}
	if out := e.ok(t, nil, "keys").stdout; !strings.Contains(out, `"acme corp"`) || !strings.Contains(out, "3 enqueues in") {
		t.Errorf("keys table:\n%s", out)
	}
}
