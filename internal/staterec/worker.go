package staterec

import (
	"context"
	"time"
)

// Prepare returns the tracker of a worker whose registered task types are
// types, tracked by default when def, writing "running" records after
// runningAfter with the writer newWriter returns. ensure creates the state
// bucket: at once when a type is tracked (its error is Prepare's), else
// the first time a task of an untracked type asks for records
// ([Tracker.Ready]).
func Prepare(ctx context.Context, types []TypeSetting, def bool, runningAfter time.Duration,
	ensure func(context.Context) error, newWriter func() (*Writer, error)) (*Tracker, error) {
	tracked := TrackedTypes(types, def)
	later := ensure
	if len(tracked) > 0 {
		if err := ensure(ctx); err != nil {
			return nil, err
		}
		later = nil
	}
	w, err := newWriter()
	if err != nil {
		return nil, err
	}
	return NewTracker(w, runningAfter, tracked, later), nil
}
