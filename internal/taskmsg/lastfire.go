package taskmsg

import (
	"time"

	"github.com/jetflow-io/jetflow/internal/cronexpr"
)

// LastFire computes a schedule's latest tick before next (its next fire
// time, from [NextFire]) that is not before stored and not after now: the
// interval before next for "@every", the previous cron match in the zone
// otherwise. It returns the zero time when the schedule has not ticked since
// it was stored, or the spec or zone cannot be read.
func LastFire(spec, zone string, stored, next, now time.Time) time.Time {
	expr, err := cronexpr.Parse(spec)
	if err != nil || next.IsZero() {
		return time.Time{}
	}
	var last time.Time
	if d, ok := expr.Every(); ok {
		last = next.Add(-d)
	} else {
		loc := time.UTC
		if zone != "" {
			l, err := LoadZone(zone)
			if err != nil {
				return time.Time{}
			}
			loc = l
		}
		last = expr.Prev(next, loc)
	}
	if last.IsZero() || last.Before(stored) || last.After(now) {
		return time.Time{}
	}
	return last.UTC()
}
