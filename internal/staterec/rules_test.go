package staterec

import (
	"maps"
	"testing"
)

// A type's own setting wins; 0 follows the worker's default.
func TestTrackedTypes(t *testing.T) {
	types := []TypeSetting{{"on", 1}, {"off", -1}, {"default", 0}}
	cases := []struct {
		def  bool
		want map[string]bool
	}{
		{false, map[string]bool{"on": true}},
		{true, map[string]bool{"on": true, "default": true}},
	}
	for _, c := range cases {
		if got := TrackedTypes(types, c.def); !maps.Equal(got, c.want) {
			t.Errorf("TrackedTypes(def=%v) = %v; want %v", c.def, got, c.want)
		}
	}
	if got := TrackedTypes([]TypeSetting{{"off", -1}}, true); len(got) != 0 {
		t.Errorf("only a type turned off: tracked %v", got)
	}
	if got := TrackedTypes(nil, true); len(got) != 0 {
		t.Errorf("no types: tracked %v", got)
	}
}

// Every record for a tracked type; only the bucket for an awaited one.
func TestStartOf(t *testing.T) {
	cases := []struct {
		tracked, awaited bool
		want             Start
	}{
		{true, false, StartRecords},
		{true, true, StartRecords},
		{false, true, StartEnsure},
		{false, false, StartNothing},
	}
	for _, c := range cases {
		if got := StartOf(c.tracked, c.awaited); got != c.want {
			t.Errorf("StartOf(tracked=%v, awaited=%v) = %v; want %v", c.tracked, c.awaited, got, c.want)
		}
	}
}

// Which outcomes get a record, and which records are confirmed.
func TestFinishOf(t *testing.T) {
	type in struct {
		state                          string
		tracked, awaited, asked, wrote bool
	}
	cases := []struct {
		in             in
		write, confirm bool
	}{
		// Tracked: every outcome; confirmed only when awaited.
		{in{Succeeded, true, false, false, false}, true, false},
		{in{Failed, true, false, true, false}, true, false},
		{in{Dead, true, true, false, false}, true, true},
		{in{Retrying, true, false, false, false}, true, false},
		{in{Retrying, true, true, false, false}, true, true}, // Tracker.Finished never confirms a retry
		// Untracked, nothing asked: no record at all.
		{in{Succeeded, false, false, false, false}, false, false},
		{in{Dead, false, false, false, true}, false, false},
		// Untracked, awaited or asked: the final outcome, confirmed.
		{in{Succeeded, false, true, false, false}, true, true},
		{in{Failed, false, false, true, false}, true, true},
		{in{Dead, false, true, true, false}, true, true},
		// Untracked retry: only after a progress record.
		{in{Retrying, false, true, false, false}, false, false},
		{in{Retrying, false, false, true, false}, false, false},
		{in{Retrying, false, false, true, true}, true, true},
		// Not an outcome.
		{in{Running, true, true, true, true}, false, false},
		{in{"", true, false, false, false}, false, false},
	}
	for _, c := range cases {
		i := c.in
		w, cf := FinishOf(i.state, i.tracked, i.awaited, i.asked, i.wrote)
		if w != c.write || cf != c.confirm {
			t.Errorf("FinishOf%+v = write %v, confirm %v; want %v, %v", i, w, cf, c.write, c.confirm)
		}
	}
}

// Final and Known partition the states.
func TestStates(t *testing.T) {
	for _, s := range []string{Pending, Scheduled, Running, Retrying} {
		if Final(s) || !Known(s) {
			t.Errorf("%s: final %v known %v", s, Final(s), Known(s))
		}
	}
	for _, s := range []string{Succeeded, Failed, Dead, Cancelled} {
		if !Final(s) || !Known(s) {
			t.Errorf("%s: final %v known %v", s, Final(s), Known(s))
		}
	}
	for _, s := range []string{"", "done", "Succeeded"} {
		if Final(s) || Known(s) {
			t.Errorf("%q: final %v known %v", s, Final(s), Known(s))
		}
	}
}
