package ratelimit

import (
	"strings"
	"testing"
	"time"
)

func TestNormalize(t *testing.T) {
	t.Parallel()
	l, err := Limit{Limit: 10}.Normalize()
	if err != nil || l.Interval != time.Second || l.Burst != 1 {
		t.Fatalf("defaults: %+v, %v; want 1 s interval, burst 1", l, err)
	}
	if l.Emission() != 100*time.Millisecond || l.Tolerance() != 0 || l.Horizon() != 400*time.Millisecond {
		t.Errorf("emission %v tolerance %v horizon %v, want 100ms 0s 400ms", l.Emission(), l.Tolerance(), l.Horizon())
	}
	for _, tc := range []struct {
		l    Limit
		want string
	}{
		{Limit{Limit: 0}, "want ≥ 1"},
		{Limit{Limit: 1, Interval: time.Microsecond}, "interval"},
		{Limit{Limit: 2, Burst: 3}, "burst"},
		{Limit{Limit: 2_000_000}, "above 1,000,000 per second"},
	} {
		if _, err := tc.l.Normalize(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one mentioning %q", tc.l, err, tc.want)
		}
	}
}

func TestRecordCountsPerSecond(t *testing.T) {
	t.Parallel()
	var r Record
	t0 := time.Unix(1_000, 0)
	r.countAt(t0, 3)
	r.countAt(t0.Add(500*time.Millisecond), 2)
	if r.Window != 1_000 || r.Count != 5 || r.Prev != 0 {
		t.Fatalf("same second: %+v", r)
	}
	r.countAt(t0.Add(time.Second), 1)
	if r.Window != 1_001 || r.Count != 1 || r.Prev != 5 {
		t.Fatalf("next second: %+v", r)
	}
	r.countAt(t0.Add(5*time.Second), 4)
	if r.Window != 1_005 || r.Count != 4 || r.Prev != 0 {
		t.Fatalf("after a gap: %+v", r)
	}
}

func TestRecordSane(t *testing.T) {
	t.Parallel()
	now := time.Now()
	l, _ := Limit{Limit: 1}.Normalize()
	if r := (Record{TAT: now.Add(MaxThrottle).UnixNano()}); !r.Sane(now, l) {
		t.Error("a TAT one maximal throttle ahead is refused")
	}
	if r := (Record{TAT: now.Add(48 * time.Hour).UnixNano()}); r.Sane(now, l) {
		t.Error("a TAT two days ahead is accepted")
	}
	if r := (Record{Count: -1}); r.Sane(now, l) {
		t.Error("a negative count is accepted")
	}
}
