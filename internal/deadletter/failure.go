package deadletter

import (
	"context"
	"time"
)

// Failure is the last failed attempt of a task still in the task stream, as
// workers recorded it in the errors bucket.
type Failure struct {
	// Attempt is the attempt that failed, from 1; Error its error text.
	Attempt int
	Error   string
	// At is when it was recorded.
	At time.Time
}

// LastFailure returns the last failed attempt recorded for the task with
// taskID stored at seq, and false when none was (the task never failed, or
// the workers run without dead letters). A missing errors bucket reads as no
// failure.
func (c *Core) LastFailure(ctx context.Context, seq uint64, taskID string) (Failure, bool, error) {
	h, err := c.history(ctx, seq, taskID)
	if err != nil || h.last == nil {
		return Failure{}, false, err
	}
	return Failure{Attempt: h.last.Attempt, Error: h.last.Error, At: h.lastAt}, true, nil
}
