package keylimit_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/testutil"
)

// An ordered type in lanes with PerKey 1 reads the overrides through
// LaneLimit: once key "vip" is set to 3, three of its tasks run at once
// while "std" keeps 1; once the override is removed, vip runs one at a
// time again.
func TestLaneLimitReadsOverrides(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const typ = "acct.lanes"
	g := newGauge()
	release := make(chan struct{})
	done := make(chan string, 16)
	w := e.Worker(t, framework.WithConcurrency(8))
	keylimit.Install(w)
	limit := keylimit.LaneLimit(w, typ)
	w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		key := task.Key()
		g.enter(key, task.Attempt)
		defer g.leave(key)
		if key == "vip" {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		done <- key
		return nil
	}, framework.WithOrdering(framework.Ordering{Lanes: 4, PerKey: 1, Limit: limit}))
	testutil.StartWorker(t, w)
	if err := keylimit.Set(t.Context(), e.Client, typ, "vip", 3); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "the worker sees the override", func() bool { return limit("vip") == 3 })
	if n := limit("std"); n != 0 {
		t.Errorf("std without an override: limit %d, want 0 (the lanes' PerKey)", n)
	}
	for _, key := range []string{"vip", "std", "vip", "std", "vip", "std"} {
		e.Enqueue(t, typ, "x", framework.WithKey(key), framework.Ordered(key))
	}
	testutil.Wait(t, waitLong, "three vip tasks running at once", func() bool { return g.peak("vip") == 3 })
	close(release)
	for range 6 {
		testutil.Recv(t, done, waitLong, "a task done")
	}
	if p := g.peak("std"); p != 1 {
		t.Errorf("std: %d running at once, limit 1", p)
	}

	if err := keylimit.Remove(t.Context(), e.Client, typ, "vip"); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "the worker sees the removal", func() bool { return limit("vip") == 0 })
	g.reset()
	for range 4 {
		e.Enqueue(t, typ, "x", framework.WithKey("vip"), framework.Ordered("vip"))
	}
	for range 4 {
		testutil.Recv(t, done, waitLong, "a vip task done")
	}
	if p := g.peak("vip"); p != 1 {
		t.Errorf("vip after the removal: %d running at once, PerKey 1", p)
	}
}

// LaneLimit needs Install.
func TestLaneLimitWithoutInstallPanics(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	defer func() {
		if recover() == nil {
			t.Error("LaneLimit on a worker without Install did not panic")
		}
	}()
	keylimit.LaneLimit(e.Worker(t), "acct.lanes")
}

// Set refuses an override for a type that no live worker serves while
// workers run (a misspelt type would never apply); AnyType sets it.
func TestSetRefusesAnUnknownType(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	if err := keylimit.Set(t.Context(), e.Client, "acct.later", "", 2); err != nil {
		t.Fatalf("no worker yet: %v", err)
	}
	w := e.Worker(t)
	keylimit.Install(w)
	w.HandleFunc("acct.export", func(context.Context, *framework.Task) error { return nil }, keylimit.PerKey(1))
	testutil.StartWorker(t, w)
	op := inspect.New(e.Client)
	testutil.Wait(t, waitLong, "the worker registered", func() bool {
		f, err := op.Workers(t.Context())
		return err == nil && f.ByType()["acct.export"] == 1
	})
	err := keylimit.Set(t.Context(), e.Client, "acct.exprot", "vip", 3)
	if !errors.Is(err, keylimit.ErrUnknownType) || !errors.Is(err, framework.ErrInvalidOption) {
		t.Fatalf("override for a type no worker serves: %v", err)
	}
	if err := keylimit.Set(t.Context(), e.Client, "acct.export", "vip", 3); err != nil {
		t.Fatalf("override for a served type: %v", err)
	}
	if err := keylimit.Set(t.Context(), e.Client, "acct.exprot", "vip", 3, keylimit.AnyType()); err != nil {
		t.Fatalf("AnyType: %v", err)
	}
	u, err := keylimit.List(t.Context(), e.Client)
	if err != nil || len(u.Overrides) != 3 {
		t.Fatalf("overrides %+v, %v: want acct.later, acct.export and acct.exprot", u, err)
	}
}
