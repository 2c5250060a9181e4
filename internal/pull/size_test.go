package pull

import (
	"testing"
	"time"
)

func TestPullBatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		base, conc  int
		maxInFlight int
		avg         time.Duration
		competing   bool
		want        int
	}{
		{"not measured yet", 32, 32, 1000, 0, false, 32},
		{"no-op tasks: nats.go's default batch", 32, 32, 1000, 3 * time.Microsecond, false, 500},
		{"1 ms tasks: capped", 32, 32, 1000, time.Millisecond, false, 500},
		{"10 ms tasks: 20 ms of work per slot", 32, 32, 1000, 10 * time.Millisecond, false, 96},
		{"slow tasks: the slots only", 32, 32, 1000, time.Second, false, 32},
		{"higher priorities waiting", 32, 32, 1000, 3 * time.Microsecond, true, 32},
		{"small in-flight cap: half of it", 8, 8, 100, 3 * time.Microsecond, false, 50},
		{"never below the base", 64, 8, 100, 3 * time.Microsecond, false, 64},
	}
	for _, tc := range tests {
		if got := Batch(tc.base, tc.conc, tc.maxInFlight, tc.avg, tc.competing); got != tc.want {
			t.Errorf("%s: Batch = %d, want %d", tc.name, got, tc.want)
		}
	}
}
