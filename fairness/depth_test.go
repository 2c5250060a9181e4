package fairness

import (
	"math"
	"testing"
	"time"
)

func TestTargetDepth(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		minDepth int
		rate     float64
		wait     time.Duration
		want     int
	}{
		{"idle keeps the minimum", 64, 0, 20 * time.Millisecond, 64},
		{"slow tasks keep the minimum", 64, 100, 20 * time.Millisecond, 64},
		{"rate times wait", 64, 50000, 20 * time.Millisecond, 1000},
		{"rounds up", 1, 150, 10 * time.Millisecond, 2},
		{"capped", 64, 1e6, 20 * time.Millisecond, DepthCap},
		{"a minimum above the cap wins", 5000, 1e6, 20 * time.Millisecond, 5000},
		{"infinite rate is capped", 64, math.Inf(1), 20 * time.Millisecond, DepthCap},
		{"NaN keeps the minimum", 64, math.NaN(), 20 * time.Millisecond, 64},
		{"negative wait turns it off", 64, 50000, -1, 64},
		{"zero wait turns it off", 64, 50000, 0, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := targetDepth(tc.minDepth, tc.rate, tc.wait); got != tc.want {
				t.Errorf("targetDepth(%d, %v, %v) = %d, want %d", tc.minDepth, tc.rate, tc.wait, got, tc.want)
			}
		})
	}
}

func TestRateMeter(t *testing.T) {
	t.Parallel()
	var r rateMeter
	t0 := time.Unix(1000, 0)
	if got := r.observe(t0, 0); got != 0 {
		t.Fatalf("first look: rate %v, want 0", got)
	}
	// 10,000 tasks/s, looked at every 10 ms: samples every 20 ms.
	var done int64
	now := t0
	for range 100 {
		now, done = now.Add(10*time.Millisecond), done+100
		r.observe(now, done)
	}
	if got := r.rate; math.Abs(got-10000) > 100 {
		t.Fatalf("steady 10,000/s: rate %v", got)
	}
	// A look within the window changes nothing.
	if got := r.observe(now.Add(time.Millisecond), done+1000); got != r.rate || r.done != done {
		t.Fatalf("look within the window: rate %v, done %d", got, r.done)
	}
	// An idle second decays the rate to about nothing in one look.
	if got := r.observe(now.Add(time.Second), done); got > 1 {
		t.Fatalf("after an idle second: rate %v", got)
	}
}
