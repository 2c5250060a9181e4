package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/testutil"
)

// A worker whose handler takes payload versions 1 and 2 hands back a
// version 3 task: `jetflow workers` shows the versions it accepts and
// flags version 3 as accepted by no live worker, as do `status` and the
// JSON of both.
func TestWorkersShowUnservedPayloadVersion(t *testing.T) {
	t.Parallel()
	const typ = "orders.ship"
	e := newEnv(t)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc(typ, func(context.Context, *framework.Task) error { return nil }, framework.AcceptVersions(1, 2))
	}, framework.WithTimings(framework.Timings{RegistryInterval: time.Second}), framework.WithWorkerID("ship-v2"))
	if _, err := e.cl.Enqueue(t.Context(), typ, []byte(`{}`), framework.PayloadVersion(3)); err != nil {
		t.Fatal(err)
	}
	var f inspect.Fleet
	testutil.Wait(t, 30*time.Second, "version 3 listed as unserved", func() bool {
		f = inspect.Fleet{}
		e.ok(t, &f, "workers", "--json")
		return len(f.Unserved) == 1
	})
	u := f.Unserved[0]
	if u.Type != typ || u.Version != 3 || len(u.RefusedBy) != 1 || u.RefusedBy[0] != "ship-v2" || u.Count == 0 {
		t.Errorf("unserved %+v", u)
	}
	if len(f.Workers) != 1 || len(f.Workers[0].Types) != 1 || len(f.Workers[0].Types[0].Versions) != 2 {
		t.Errorf("workers %+v, want one accepting versions 1 and 2", f.Workers)
	}
	out := e.ok(t, nil, "workers").stdout
	if !strings.Contains(out, typ+" (critical,high,normal,low) v1-2") ||
		!strings.Contains(out, "PAYLOAD VERSION 3 of "+typ+": NO LIVE WORKER ACCEPTS IT") {
		t.Errorf("workers:\n%s", out)
	}
	if out := e.ok(t, nil, "status").stdout; !strings.Contains(out, "PAYLOAD VERSION 3 of "+typ) {
		t.Errorf("status:\n%s", out)
	}
}
