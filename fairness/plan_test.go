package fairness

import (
	"reflect"
	"testing"
)

func TestPlan(t *testing.T) {
	one := func(string) int { return 1 }
	tests := []struct {
		name    string
		last    string
		waiting map[string]uint64
		budget  int
		weight  func(string) int
		want    []take
		after   string
	}{
		{"one each, in order", "", map[string]uint64{"b": 5, "a": 5, "c": 5}, 3, one,
			[]take{{"a", 1}, {"b", 1}, {"c", 1}}, "c"},
		{"after the last served", "a", map[string]uint64{"a": 5, "b": 5, "c": 5}, 2, one,
			[]take{{"b", 1}, {"c", 1}}, "c"},
		{"wraps around", "b", map[string]uint64{"a": 5, "b": 5, "c": 5}, 2, one,
			[]take{{"c", 1}, {"a", 1}}, "a"},
		{"a gone last key", "bb", map[string]uint64{"a": 5, "c": 5}, 1, one,
			[]take{{"c", 1}}, "c"},
		{"a large backlog gets its turns only", "", map[string]uint64{"noisy": 100000, "quiet": 1}, 4, one,
			[]take{{"noisy", 3}, {"quiet", 1}}, "noisy"},
		{"budget beyond what waits", "", map[string]uint64{"a": 2, "b": 1}, 10, one,
			[]take{{"a", 2}, {"b", 1}}, "a"},
		{"weights", "", map[string]uint64{"a": 10, "b": 10}, 8,
			func(s string) int {
				if s == "a" {
					return 3
				}
				return 1
			},
			[]take{{"a", 6}, {"b", 2}}, "b"},
		{"empty", "", map[string]uint64{"a": 0}, 4, one, nil, ""},
		{"no budget", "", map[string]uint64{"a": 3}, 0, one, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := turns{last: tt.last, used: 1} // the last key had its turn
			got := r.plan(tt.waiting, tt.budget, tt.weight)
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("plan = %v, want %v", got, tt.want)
			}
			if r.last != tt.after && tt.want != nil {
				t.Errorf("last = %q, want %q", r.last, tt.after)
			}
		})
	}
}

// TestPlanWeightAcrossRounds: a weight larger than a round's budget spans
// rounds: rounds of one task give 3 big, 1 small, 3 big…
func TestPlanWeightAcrossRounds(t *testing.T) {
	var r turns
	weight := func(s string) int {
		if s == "big" {
			return 3
		}
		return 1
	}
	var got []string
	for range 8 {
		for _, tk := range r.plan(map[string]uint64{"big": 100, "small": 100}, 1, weight) {
			got = append(got, tk.subject)
		}
	}
	want := []string{"big", "big", "big", "small", "big", "big", "big", "small"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("rounds %v, want %v", got, want)
	}
}
