package taskmsg

import (
	"testing"
	"time"
)

func TestLastFire(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 2, 10, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		name               string
		spec, zone         string
		stored, next, want time.Time
	}{
		{"cron ticked since stored", "0 0 * * * *", "", now.Add(-2 * time.Hour), now.Add(30 * time.Minute), now.Add(-30 * time.Minute)},
		{"cron stored after the last tick", "0 0 * * * *", "", now.Add(-10 * time.Minute), now.Add(30 * time.Minute), time.Time{}},
		{"every", "@every 1m", "", now.Add(-5 * time.Minute), now.Add(20 * time.Second), now.Add(-40 * time.Second)},
		{"zone", "0 0 9 * * *", "Europe/Paris", now.Add(-48 * time.Hour), time.Date(2026, 3, 3, 8, 0, 0, 0, time.UTC), time.Date(2026, 3, 2, 8, 0, 0, 0, time.UTC)},
		{"bad spec", "nope", "", now.Add(-time.Hour), now, time.Time{}},
		{"bad zone", "0 0 9 * * *", "Mars/Olympus", now.Add(-48 * time.Hour), now.Add(time.Hour), time.Time{}},
		{"no next", "0 0 * * * *", "", now.Add(-time.Hour), time.Time{}, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.zone != "" && tc.zone != "Mars/Olympus" {
				if _, err := time.LoadLocation(tc.zone); err != nil {
					t.Skip("no time zone database")
				}
			}
			if got := LastFire(tc.spec, tc.zone, tc.stored, tc.next, now); !got.Equal(tc.want) {
				t.Fatalf("LastFire = %v, want %v", got, tc.want)
			}
		})
	}
}
