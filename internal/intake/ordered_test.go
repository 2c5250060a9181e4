package intake

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// PlanOrdered lists, for each task partition in order, an ordered type's
// partitions or lanes in order, each with its consumer's name and a spec
// carrying the type's settings.
func TestPlanOrdered(t *testing.T) {
	t.Parallel()
	n := names(t)
	parts := n.Partitions(2)
	tests := []struct {
		name string
		o    Ordered
		want []string // partition/name per consumer
	}{
		{"partitions", Ordered{TaskType: "o.t", Partitions: 2, MaxDeliver: 5, AckWait: time.Minute},
			[]string{"0/o_t-ord2-0", "0/o_t-ord2-1", "1/o_t-ord2-0", "1/o_t-ord2-1"}},
		{"lanes, partitions ignored", Ordered{TaskType: "o.t", Partitions: 8, Lanes: 2, MaxDeliver: -1, AckWait: time.Minute},
			[]string{"0/o_t-lane2-0", "0/o_t-lane2-1", "1/o_t-lane2-0", "1/o_t-lane2-1"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			plan := PlanOrdered(parts, tc.o)
			var got []string
			for i, c := range plan {
				got = append(got, fmt.Sprintf("%d/%s", c.Names.PartitionIndex(), c.Name))
				if c.Lane != (tc.o.Lanes > 0) {
					t.Errorf("consumer %d: Lane %v with %d lanes", i, c.Lane, tc.o.Lanes)
				}
				idx := i % max(tc.o.Lanes, 1)
				if c.Lane {
					want := topology.LaneConsumerSpec{TaskType: "o.t", Lanes: tc.o.Lanes, Lane: idx,
						MaxDeliver: tc.o.MaxDeliver, AckWait: tc.o.AckWait}
					if c.LaneSpec != want || c.Partition != (topology.OrderedConsumerSpec{}) {
						t.Errorf("consumer %d: lane spec %+v, partition spec %+v; want %+v alone", i, c.LaneSpec, c.Partition, want)
					}
					continue
				}
				want := topology.OrderedConsumerSpec{TaskType: "o.t", Partitions: tc.o.Partitions, Partition: i % tc.o.Partitions,
					MaxDeliver: tc.o.MaxDeliver, AckWait: tc.o.AckWait}
				if c.Partition != want || c.LaneSpec != (topology.LaneConsumerSpec{}) {
					t.Errorf("consumer %d: partition spec %+v, lane spec %+v; want %+v alone", i, c.Partition, c.LaneSpec, want)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("PlanOrdered = %v, want %v", got, tc.want)
			}
		})
	}
	if plan := PlanOrdered(nil, Ordered{TaskType: "o", Partitions: 4}); len(plan) != 0 {
		t.Errorf("no task partition: %d consumers", len(plan))
	}
}

// EnsureOrdered ensures the consumers of the plan on the server, each a
// start-up step named after its stream and consumer, and returns them to
// pull at normal priority, a lane's marked with its task partition.
func TestStageEnsureOrdered(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 1, streams.Config{Partitions: 2})
	if err := h.s.Discover(t.Context()); err != nil {
		t.Fatal(err)
	}
	parts := h.s.Partitions().Names()
	if len(parts) != 2 {
		t.Fatalf("%d task partitions, want 2", len(parts))
	}
	tests := []struct {
		name string
		o    Ordered
	}{
		{"partitions", Ordered{TaskType: "o", Partitions: 4, MaxDeliver: -1, AckWait: 7 * time.Second}},
		{"lanes", Ordered{TaskType: "l", Lanes: 2, MaxDeliver: 3, AckWait: 9 * time.Second}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ := h.add(tc.o.TaskType)
			h.mu.Lock()
			h.steps = nil
			h.mu.Unlock()
			srcs, err := h.s.EnsureOrdered(t.Context(), typ, tc.o, parts)
			if err != nil {
				t.Fatal(err)
			}
			plan := PlanOrdered(parts, tc.o)
			if len(srcs) != len(plan) {
				t.Fatalf("%d sources, want %d", len(srcs), len(plan))
			}
			var wantSteps []string
			for i, src := range srcs {
				c := plan[i]
				wantSteps = append(wantSteps, "consumer "+c.Names.TaskStream()+"/"+c.Name)
				wantPart := 0
				if c.Lane {
					wantPart = c.Names.PartitionIndex()
				}
				if src.Type != typ || src.Prio != streams.PriorityNormal || src.Lane != c.Lane || src.Part != wantPart {
					t.Errorf("source %d: type %v prio %v lane %v part %d; want the type at normal, lane %v part %d",
						i, src.Type.Name, src.Prio, src.Lane, src.Part, c.Lane, wantPart)
				}
				info, err := src.Cons.Info(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if info.Stream != c.Names.TaskStream() || info.Name != c.Name ||
					info.Config.MaxDeliver != tc.o.MaxDeliver || info.Config.AckWait != tc.o.AckWait {
					t.Errorf("source %d: consumer %s/%s max deliver %d ack wait %v; want %s/%s %d %v", i, info.Stream, info.Name,
						info.Config.MaxDeliver, info.Config.AckWait, c.Names.TaskStream(), c.Name, tc.o.MaxDeliver, tc.o.AckWait)
				}
				again, err := src.Ensure(t.Context())
				if err != nil || again.CachedInfo().Name != c.Name {
					t.Errorf("source %d: Ensure again = %v", i, err)
				}
			}
			h.mu.Lock()
			steps := slices.Clone(h.steps)
			h.mu.Unlock()
			if !slices.Equal(steps, wantSteps) {
				t.Errorf("steps %v, want %v", steps, wantSteps)
			}
		})
	}
	t.Run("the first error", func(t *testing.T) {
		typ := h.add("bad")
		h.mu.Lock()
		h.steps = nil
		h.mu.Unlock()
		srcs, err := h.s.EnsureOrdered(t.Context(), typ, Ordered{TaskType: "bad", Partitions: 3}, parts)
		if err == nil || srcs != nil {
			t.Errorf("3 partitions (not a divisor of 256): %d sources, error %v", len(srcs), err)
		}
		h.mu.Lock()
		steps := len(h.steps)
		h.mu.Unlock()
		if steps != 1 {
			t.Errorf("%d start-up steps ran, want the first alone", steps)
		}
	})
}
