package staterec

import (
	"context"
	"errors"
	"testing"
)

// Prepare ensures the bucket at once when a type is tracked, and leaves it
// to the first task that asks otherwise; an error of either step fails it.
func TestPrepare(t *testing.T) {
	t.Parallel()
	w, _ := stateBucket(t)
	boom := errors.New("boom")
	writer := func() (*Writer, error) { return w, nil }
	tests := []struct {
		name     string
		types    []TypeSetting
		def      bool
		ensure   error
		writer   func() (*Writer, error)
		ensured  int
		tracked  bool
		wantErr  error
		deferred bool // the bucket is ensured by the first task that asks
	}{
		{"tracked by default", []TypeSetting{{Name: "email"}}, true, nil, writer, 1, true, nil, false},
		{"tracked by its own setting", []TypeSetting{{Name: "email", Tracking: 1}}, false, nil, writer, 1, true, nil, false},
		{"untracked", []TypeSetting{{Name: "email", Tracking: -1}}, true, nil, writer, 0, false, nil, true},
		{"bucket fails", []TypeSetting{{Name: "email"}}, true, boom, writer, 1, false, boom, false},
		{"writer fails", nil, false, nil, func() (*Writer, error) { return nil, boom }, 0, false, boom, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ensured := 0
			ensure := func(context.Context) error { ensured++; return tc.ensure }
			tr, err := Prepare(t.Context(), tc.types, tc.def, 0, ensure, tc.writer)
			if !errors.Is(err, tc.wantErr) || ensured != tc.ensured {
				t.Fatalf("Prepare: %v, bucket ensured %d times; want %v, %d", err, ensured, tc.wantErr, tc.ensured)
			}
			if err != nil {
				return
			}
			if tr.Tracked("email") != tc.tracked {
				t.Errorf("Tracked = %v, want %v", !tc.tracked, tc.tracked)
			}
			if err := tr.Asked(t.Context(), Record{ID: "a", Type: "email"}); err != nil {
				t.Fatal(err)
			}
			if tc.deferred && ensured != 1 {
				t.Errorf("bucket ensured %d times after a task asked, want 1", ensured)
			}
		})
	}
}

// Routed writes the dead record of a tracked or awaited task with a valid
// ID, and nothing else.
func TestTrackerRouted(t *testing.T) {
	t.Parallel()
	w, kv := stateBucket(t)
	tr := NewTracker(w, 0, map[string]bool{"email": true}, nil)
	(*Tracker)(nil).Routed(Record{ID: "n", Type: "email"}, true, "gone") // no tracker: nothing
	tr.Routed(Record{ID: "bad id", Type: "email"}, true, "gone")
	tr.Routed(Record{ID: "r0", Type: "sms"}, false, "gone")
	tr.Routed(Record{ID: "r1", Type: "email", Attempt: 3, MaxAttempts: 3}, false, "gone")
	tr.Routed(Record{ID: "r2", Type: "sms"}, true, "gone too")
	if got := readState(t, kv, "r1", Dead); got["error"] != "gone" {
		t.Errorf("tracked task's record %v", got)
	}
	if got := readState(t, kv, "r2", Dead); got["error"] != "gone too" {
		t.Errorf("awaited task's record %v", got)
	}
	for _, id := range []string{"bad id", "r0"} {
		if _, err := kv.Get(t.Context(), Key(id)); err == nil {
			t.Errorf("a record of %q", id)
		}
	}
}
