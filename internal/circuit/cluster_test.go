package circuit

import (
	"testing"
	"time"
)

// TestReportedOpen checks how long a remote record keeps a dependency
// open by this worker's timeout: until its Until, no longer than the
// timeout after its Since (a Since slightly ahead counting as now), and
// not at all once that is past, without a Since or with one far ahead.
func TestReportedOpen(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	const timeout = time.Minute
	far := time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name         string
		since, until time.Time
		want         time.Time
		ok           bool
	}{
		{"a current report", now.Add(-10 * time.Second), now.Add(50 * time.Second), now.Add(50 * time.Second), true},
		{"until far ahead", now.Add(-10 * time.Second), far, now.Add(50 * time.Second), true},
		{"since a little ahead (clock skew)", now.Add(10 * time.Second), far, now.Add(timeout), true},
		{"since far ahead", now.Add(time.Hour), far, time.Time{}, false},
		{"opened long ago", now.Add(-time.Hour), far, time.Time{}, false},
		{"no since", time.Time{}, far, time.Time{}, false},
	}
	for _, c := range cases {
		got, ok := reportedOpen(Record{State: Open, Since: c.since, Until: c.until}, timeout, now)
		if ok != c.ok || ok && !got.Equal(c.want) {
			t.Errorf("%s: reportedOpen = %v, %v; want %v, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
