package lanes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
)

// Assign gives every lane one owner, at most ceil(lanes/workers) each,
// the same whatever the order of the IDs, and when a worker joins it moves
// lanes mostly to the joiner.
func TestAssignSpreadsEvenlyAndMovesLittle(t *testing.T) {
	t.Parallel()
	for _, lanes := range []int{1, 3, 8, 16, 64} {
		for workers := 1; workers <= 5; workers++ {
			var ids []string
			for i := range workers {
				ids = append(ids, fmt.Sprintf("worker-%d", i))
			}
			owners := Assign("orders", lanes, ids)
			count := map[string]int{}
			for l, o := range owners {
				if o == "" {
					t.Fatalf("%d lanes, %d workers: lane %d has no owner", lanes, workers, l)
				}
				count[o]++
			}
			bound := (lanes + workers - 1) / workers
			for id, c := range count {
				if c > bound {
					t.Errorf("%d lanes, %d workers: %s owns %d, bound %d", lanes, workers, id, c, bound)
				}
			}
			if lanes >= workers && len(count) != workers {
				t.Errorf("%d lanes, %d workers: only %d workers own a lane", lanes, workers, len(count))
			}
			reversed := make([]string, len(ids))
			for i, id := range ids {
				reversed[len(ids)-1-i] = id
			}
			for l, o := range Assign("orders", lanes, append(reversed, ids[0])) {
				if o != owners[l] {
					t.Fatalf("%d lanes, %d workers: the owners depend on the listing's order or duplicates", lanes, workers)
				}
			}
		}
	}
	before := Assign("orders", 64, []string{"w1", "w2", "w3"})
	after := Assign("orders", 64, []string{"w1", "w2", "w3", "w4"})
	moved, toJoiner := 0, 0
	for l := range before {
		if before[l] != after[l] {
			moved++
			if after[l] == "w4" {
				toJoiner++
			}
		}
	}
	if toJoiner != 16 || moved > 2*toJoiner {
		t.Errorf("a fourth worker of 64 lanes: %d moved, %d to it; want 16 to it and few others", moved, toJoiner)
	}
	if Assign("orders", 4, nil) != nil {
		t.Error("lanes have owners without workers")
	}
}

// A plan decides on the registry's listing, counts itself in before its
// record is listed, and pulls every lane when the registry cannot be read.
func TestPlanOwns(t *testing.T) {
	t.Parallel()
	var reads atomic.Int32
	listing := map[string][]string{"orders": {"w1", "w2"}}
	p := &Plan{Self: "w1", List: func(context.Context) (map[string][]string, error) {
		reads.Add(1)
		return listing, nil
	}}
	owners := Assign("orders", 32, []string{"w1", "w2"})
	mine := 0
	for l := range 32 {
		if p.Owns("orders", l, 32) != (owners[l] == "w1") {
			t.Fatalf("lane %d: Owns disagrees with Assign", l)
		}
		if p.Owns("orders", l, 32) {
			mine++
		}
	}
	if mine != 16 {
		t.Errorf("w1 owns %d of 32 lanes shared with w2, want 16", mine)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("%d registry reads for one fresh listing", n)
	}
	// A type the listing does not name yet: the worker alone serves it.
	for l := range 8 {
		if !p.Owns("new.type", l, 8) {
			t.Errorf("lane %d of a type only this worker serves is not its own", l)
		}
	}
	if p.Owns("orders", 32, 32) || p.Owns("orders", -1, 32) {
		t.Error("a lane out of range is owned")
	}
	// No registry: every lane.
	q := &Plan{Self: "w2", List: func(context.Context) (map[string][]string, error) {
		return nil, fmt.Errorf("bucket: %w", errors.New("not found"))
	}}
	for l := range 8 {
		if !q.Owns("orders", l, 8) {
			t.Errorf("lane %d not pulled without a registry", l)
		}
	}
}

// A plan decides on its latest listing: once a worker joins, the lanes
// Assign gives it are no longer this worker's, and a read that fails
// leaves every lane pulled again.
func TestPlanFollowsNewListings(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex // a refresh may run in the background
	listing := map[string][]string{"orders": {"w1"}}
	var fail bool
	p := &Plan{Self: "w1", List: func(context.Context) (map[string][]string, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return nil, errors.New("registry unavailable")
		}
		return listing, nil
	}}
	for l := range 16 {
		if !p.Owns("orders", l, 16) {
			t.Fatalf("lane %d: a lone worker does not own it", l)
		}
	}
	mu.Lock()
	listing = map[string][]string{"orders": {"w1", "w2"}}
	mu.Unlock()
	p.refresh() // what Owns starts once the listing is older than PlanAge
	owners := Assign("orders", 16, []string{"w1", "w2"})
	for l := range 16 {
		if p.Owns("orders", l, 16) != (owners[l] == "w1") {
			t.Fatalf("lane %d: the plan still decides on the listing before w2 joined", l)
		}
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	p.refresh()
	for l := range 16 {
		if !p.Owns("orders", l, 16) {
			t.Fatalf("lane %d: not pulled after the registry could not be read", l)
		}
	}
}
