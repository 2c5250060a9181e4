package framework

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jetflow-io/jetflow/internal/staterec"
)

// Progress is what a handler reported of a running task's progress with
// [ReportProgress]: Done units of work out of Total, and a short message.
// It appears in the task's state record ([TaskRecord.Progress]); the final
// record keeps the last one reported.
type Progress struct {
	// Done is the work done so far, ≥ 0.
	Done int64 `json:"done"`
	// Total is the work to do, ≥ Done; 0 when it is not known.
	Total int64 `json:"total,omitempty"`
	// Message says what the task is doing, at most [MaxProgressMessage]
	// bytes of UTF-8 on one line.
	Message string `json:"message,omitempty"`
}

// IsZero reports whether p is the zero value (no progress reported).
func (p Progress) IsZero() bool { return p == Progress{} }

// Percent returns Done as a percentage of Total, and false when Total is
// not known.
func (p Progress) Percent() (float64, bool) {
	if p.Total <= 0 {
		return 0, false
	}
	return 100 * float64(p.Done) / float64(p.Total), true
}

// String formats p as "42/100 (42%) message", or "42 message" when the
// total is not known.
func (p Progress) String() string {
	s := strconv.FormatInt(p.Done, 10)
	if pct, ok := p.Percent(); ok {
		s = fmt.Sprintf("%d/%d (%.0f%%)", p.Done, p.Total, pct)
	}
	if p.Message != "" {
		s += " " + p.Message
	}
	return s
}

// UnmarshalJSON decodes a progress read from a state record. A record is
// data anyone allowed to write the state bucket may have forged: a value
// that breaks the rules [ReportProgress] enforces, or is not a progress at
// all, decodes as the zero Progress (none) rather than failing the whole
// record.
func (p *Progress) UnmarshalJSON(b []byte) error {
	var v staterec.Progress
	err := v.UnmarshalJSON(b) // staterec.Progress.UnmarshalJSON: the same rules
	*p = Progress(v)
	return err
}

// ReportProgress records the progress of the task a handler's ctx belongs
// to: done units of work out of total (0 when the total is not known), and
// msg, a short line saying what it is doing. The task's state record shows
// it while the task runs ([Inspector.GetTask], `jetflow tasks get`, the
// dashboard's task page), and its final record keeps the last value.
//
// It does not wait for the server: the record is written at once when no
// progress was written within [ProgressInterval], else when the interval
// has passed, with the latest value reported by then. Report as often as
// is convenient; the cost is at most one record per interval.
//
// It works whether or not state tracking is on for the task's type: a task
// of an untracked type that reports progress gets its progress records and
// its final record (the first such task of a worker creates the state
// bucket, one round trip). It returns [ErrNoTask] outside a handler and an
// error wrapping [ErrInvalidProgress] for negative counts, done above a
// known total, or a message longer than [MaxProgressMessage] bytes, not
// UTF-8, or holding control characters (line breaks included). Calls from
// several goroutines of one handler are safe once a first call (or
// [SetResult]) returned.
func ReportProgress(ctx context.Context, done, total int64, msg string) error {
	t := TaskFromContext(ctx)
	if t == nil {
		return ErrNoTask
	}
	p := staterec.Progress{Done: done, Total: total, Message: msg}
	if err := staterec.CheckProgress(p); err != nil {
		return fmt.Errorf("%w: task %s: %w", ErrInvalidProgress, t.ID, err)
	}
	tr := t.tracker()
	if tr == nil { // a task built for a test, with no worker
		t.stateOf().Report(p, ProgressInterval, func(staterec.Progress) {})
		return nil
	}
	if err := t.recordsAsked(ctx, tr); err != nil {
		return err
	}
	tr.Progress(record(t), t.stateOf(), p)
	return nil
}
