package debounce

import (
	"testing"
	"time"
)

// TestCheckDue: a check is due a window after its enqueue until that
// passes the burst's maximum wait less the lead (a quarter of the maximum
// wait when that is less than Lead); then it is capped there; a full
// burst's is due at once.
func TestCheckDue(t *testing.T) {
	first := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return first.Add(d) }
	ms := time.Millisecond
	for _, c := range []struct {
		name            string
		now             time.Duration
		maxWait, window time.Duration
		full            bool
		due             time.Duration
		capped          bool
	}{
		{"first enqueue", 0, 10 * time.Second, time.Second, false, time.Second, false},
		{"window before the lead", 8 * time.Second, 10 * time.Second, time.Second, false, 9 * time.Second, false},
		{"window past the lead", 9 * time.Second, 10 * time.Second, time.Second, false, 10*time.Second - Lead, true},
		{"short maximum wait: a quarter", 700 * ms, 800 * ms, 200 * ms, false, 600 * ms, true},
		{"one second: the whole lead", 600 * ms, time.Second, 200 * ms, false, 750 * ms, true},
		{"full", 300 * ms, time.Second, 200 * ms, true, 300 * ms, true},
	} {
		due, capped := checkDue(at(c.now), first.UnixNano(), c.maxWait, c.window, c.full)
		if !due.Equal(at(c.due)) || capped != c.capped {
			t.Errorf("%s: due %v capped %v, want %v %v", c.name, due.Sub(first), capped, c.due, c.capped)
		}
	}
}
