package framework

import (
	"time"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// LastFire returns the schedule's latest tick at or before now that came
// after the definition was stored, computed from the spec like
// [ScheduleInfo.Next]; zero when it has not ticked since it was stored (or
// the spec cannot be parsed). It is when the server last published the
// task, unless the server was down at that moment.
func (s ScheduleInfo) LastFire(now time.Time) time.Time {
	return taskmsg.LastFire(s.Spec, s.TimeZone, s.Stored, s.Next, now)
}
