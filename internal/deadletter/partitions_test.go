package deadletter

import (
	"context"
	"testing"
	"time"
)

// The first core's router finds the core of each added partition by its
// task stream; a stream of no partition has none.
func TestPartitionsLookUpAddedCores(t *testing.T) {
	log := discard()
	topoOf := func(stream string) Topology {
		topo := testTopo
		topo.TaskStream = stream
		return topo
	}
	first := NewCore(nil, nil, topoOf("JETFLOW_TASKS"), log)
	d := NewPartitions(first, 4)
	second := NewCore(nil, nil, topoOf("JETFLOW_TASKS_1"), log)
	third := NewCore(nil, nil, topoOf("JETFLOW_TASKS_2"), log)
	d.Add(second)
	d.Add(third)
	for stream, want := range map[string]*Core{"JETFLOW_TASKS": first, "JETFLOW_TASKS_1": second, "JETFLOW_TASKS_2": third, "OTHER": nil} {
		if got := first.Partitions(stream); got != want {
			t.Errorf("router's core of %s: %p, want %p", stream, got, want)
		}
		if got := d.Of(stream); got != want {
			t.Errorf("Of(%s): %p, want %p", stream, got, want)
		}
	}
	if n := d.Len(); n != 3 {
		t.Fatalf("Len %d, want 3", n)
	}
}

// Run runs the router and the reconcilers, takes the cores added while it
// runs, and returns once ctx ends.
func TestPartitionsRunStopsWithItsContext(t *testing.T) {
	first, js := newCore(t)
	d := NewPartitions(first, 4)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx, time.Hour)
	}()
	topo := testTopo
	topo.TaskStream = "JETFLOW_TASKS_1"
	d.Add(NewCore(first.nc, js, topo, discard())) // taken by Run, which starts its reconciler
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
