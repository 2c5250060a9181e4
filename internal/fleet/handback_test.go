package fleet

import (
	"strconv"
	"testing"
	"time"
)

// TestDecide: the hand-back decision, served or not, around the grace,
// with the headers a task may carry.
func TestDecide(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	const grace = time.Minute
	tests := []struct {
		name string
		u    Unaccepted
		want HandBack
	}{
		{"first hand-back, served",
			Unaccepted{Served: true},
			HandBack{Delay: RetryServed, Since: now}},
		{"first hand-back, not served",
			Unaccepted{},
			HandBack{Delay: RetryBase, Since: now}},
		{"served past the grace waits",
			Unaccepted{Since: now.Add(-time.Hour), Count: "40", Served: true},
			HandBack{Delay: RetryServed, Since: now.Add(-time.Hour), Count: 40}},
		{"not served, just within the grace",
			Unaccepted{Since: now.Add(-grace + time.Nanosecond), Count: "3"},
			HandBack{Delay: 8 * RetryBase, Since: now.Add(-grace + time.Nanosecond), Count: 3}},
		{"not served, at the grace exactly",
			Unaccepted{Since: now.Add(-grace), Count: "3"},
			HandBack{DeadLetter: true, Since: now.Add(-grace), Count: 3}},
		{"not served, past the grace",
			Unaccepted{Since: now.Add(-time.Hour), Count: "9"},
			HandBack{DeadLetter: true, Since: now.Add(-time.Hour), Count: 9}},
		{"since in the future is now",
			Unaccepted{Since: now.Add(time.Hour), Count: "2"},
			HandBack{Delay: 4 * RetryBase, Since: now, Count: 2}},
		{"bogus count is none",
			Unaccepted{Since: now, Count: "many"},
			HandBack{Delay: RetryBase, Since: now}},
		{"negative count is none",
			Unaccepted{Since: now, Count: "-5"},
			HandBack{Delay: RetryBase, Since: now}},
		{"huge count is clamped",
			Unaccepted{Since: now, Count: "99999999999999999999999"},
			HandBack{Delay: RetryMax, Since: now, Count: MaxHandBacks}},
		{"count above the bound is clamped",
			Unaccepted{Since: now, Count: "1048577", Served: true},
			HandBack{Delay: RetryServed, Since: now, Count: MaxHandBacks}},
		{"last doubling below the cap",
			Unaccepted{Since: now, Count: "7"},
			HandBack{Delay: 128 * RetryBase, Since: now, Count: 7}},
		{"doubling capped",
			Unaccepted{Since: now, Count: "8"},
			HandBack{Delay: RetryMax, Since: now, Count: 8}},
		{"shift bounded",
			Unaccepted{Since: now, Count: "64"},
			HandBack{Delay: RetryMax, Since: now, Count: 64}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.u.Decide(grace, now)
			if got.DeadLetter != tt.want.DeadLetter || got.Delay != tt.want.Delay ||
				!got.Since.Equal(tt.want.Since) || got.Count != tt.want.Count {
				t.Errorf("Decide = %+v, want %+v", got, tt.want)
			}
			if got.Next() != got.Count+1 {
				t.Errorf("Next = %d, want %d", got.Next(), got.Count+1)
			}
		})
	}
}

// TestDecideBackoffGrows: each hand-back of a version nobody serves waits
// twice as long as the one before, until the cap, and never longer.
func TestDecideBackoffGrows(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	h := Unaccepted{Since: now}.Decide(time.Hour, now)
	prev := time.Duration(0)
	for range 20 {
		if h.DeadLetter {
			t.Fatal("dead-lettered within the grace")
		}
		if h.Delay > RetryMax {
			t.Fatalf("hand-back %d waits %v, above the cap", h.Count, h.Delay)
		}
		if prev != 0 && h.Delay != min(2*prev, RetryMax) {
			t.Fatalf("hand-back %d waits %v after %v", h.Count, h.Delay, prev)
		}
		prev = h.Delay
		h = Unaccepted{Since: h.Since, Count: strconv.Itoa(h.Next())}.Decide(time.Hour, now)
	}
	if prev != RetryMax {
		t.Fatalf("last wait %v, want the cap %v", prev, RetryMax)
	}
}
