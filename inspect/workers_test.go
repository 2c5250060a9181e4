package inspect_test

import (
	"context"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
)

// Two running workers are listed with what they serve and their version;
// the overview counts them per queue and flags a queue with waiting tasks
// and no worker; a worker that shuts down leaves the registry at once; a
// forged record is counted invalid, not listed.
func TestWorkersListedCountedAndRemovedAtShutdown(t *testing.T) {
	t.Parallel()
	cl := setup(t)
	ctx := t.Context()
	op := inspect.New(cl)
	f, err := op.Workers(ctx)
	if err != nil || !f.Registry || len(f.Workers) != 0 {
		t.Fatalf("Workers before any worker: %+v, %v", f, err)
	}
	if _, err := cl.JetStream().Publish(ctx, "$KV."+cl.Names().WorkersBucket()+".forged",
		[]byte(`{"id":"forged","host":"\u001b[2J","ttl_seconds":5}`)); err != nil {
		t.Fatal(err)
	}
	noop := func(context.Context, *framework.Task) error { return nil }
	start := func(id string) *framework.Worker {
		w, err := framework.NewWorker(cl.Conn(), framework.WithWorkerID(id), framework.WithVersion("app v1.2"),
			framework.WithConcurrency(3))
		if err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("mail.send", noop, framework.WithServedPriorities(framework.PriorityHigh, framework.PriorityNormal))
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
		return w
	}
	w1, _ := start("w1"), start("w2")
	if w1.ID() != "w1" {
		t.Errorf("ID() = %q", w1.ID())
	}
	testutil.Wait(t, 30*time.Second, "both workers listed", func() bool {
		f, err = op.Workers(ctx)
		return err == nil && len(f.Workers) == 2
	})
	got := f.Workers[0]
	if got.Version != "app v1.2" || got.Concurrency != 3 || got.TTL != 3*framework.DefaultRegistryInterval ||
		len(got.Types) != 1 || got.Types[0].Type != "mail.send" || len(got.Types[0].Priorities) != 2 || got.PID == 0 ||
		got.Started.IsZero() || got.LastSeen.Before(got.Started) || f.Invalid != 1 {
		t.Errorf("worker %+v (invalid %d)", got, f.Invalid)
	}

	// A task waits at low priority, which nobody serves.
	if _, err := cl.Enqueue(ctx, "mail.send", []byte(`{}`), framework.WithPriority(framework.PriorityLow)); err != nil {
		t.Fatal(err)
	}
	ov, err := op.Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, q := range ov.Queues {
		switch q.Priority {
		case framework.PriorityHigh, framework.PriorityNormal:
			seen++
			if q.Workers != 2 || q.NoWorker {
				t.Errorf("queue %s/%s: workers %d no_worker %v, want 2, false", q.Type, q.Priority, q.Workers, q.NoWorker)
			}
		case framework.PriorityLow:
			seen++
			if q.Workers != 0 || !q.NoWorker {
				t.Errorf("low queue: workers %d no_worker %v, want 0, true", q.Workers, q.NoWorker)
			}
		}
	}
	if seen != 3 || !ov.Registry {
		t.Errorf("overview: %d queues seen, registry %v: %+v", seen, ov.Registry, ov.Queues)
	}

	if err := w1.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	f, err = op.Workers(ctx)
	if err != nil || len(f.Workers) != 1 || f.Workers[0].ID != "w2" {
		t.Fatalf("after w1 shut down: %+v, %v", f, err)
	}
}

// WithWorkerID, WithVersion and Timings.RegistryInterval refuse what the
// registry could not hold.
func TestRegistryOptionsValidate(t *testing.T) {
	t.Parallel()
	cl := setup(t)
	for name, opt := range map[string]framework.WorkerOption{
		"id with dot":       framework.WithWorkerID("a.b"),
		"empty id":          framework.WithWorkerID(""),
		"control version":   framework.WithVersion("v\x1b1"),
		"empty version":     framework.WithVersion(""),
		"interval too fast": framework.WithTimings(framework.Timings{RegistryInterval: time.Millisecond}),
		"interval too slow": framework.WithTimings(framework.Timings{RegistryInterval: time.Hour}),
	} {
		if _, err := framework.NewWorker(cl.Conn(), opt); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
