package staterec

import (
	"strconv"
	"time"

	"github.com/jetflow-io/jetflow/internal/jsonw"
)

// Record is what a task state record holds, as package framework's
// TaskRecord does (its public form); Priority is the priority's name.
type Record struct {
	ID, Type, Priority, State string
	Attempt, MaxAttempts      int
	Error, Schedule           string
	Sequence                  uint64
	EnqueuedAt, ScheduledFor  time.Time
	StartedAt, FinishedAt     time.Time
	NextAttemptAt, UpdatedAt  time.Time
	Progress                  Progress // the zero value: none
	Result                    []byte   // raw JSON
	// Revision is the record's KV revision when it was read; it is not
	// stored.
	Revision uint64
}

// AppendJSON appends r as JSON, byte for byte what encoding/json produces
// for framework.TaskRecord, without reflection: records are written for
// every task.
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = jsonw.String(b, r.ID)
	if r.Type != "" {
		b = append(b, `,"type":`...)
		b = jsonw.String(b, r.Type)
	}
	b = append(b, `,"priority":`...)
	b = jsonw.String(b, r.Priority)
	b = append(b, `,"state":`...)
	b = jsonw.String(b, r.State)
	if r.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(r.Attempt), 10)
	}
	if r.MaxAttempts != 0 {
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, int64(r.MaxAttempts), 10)
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = jsonw.String(b, r.Error)
	}
	if r.Schedule != "" {
		b = append(b, `,"schedule":`...)
		b = jsonw.String(b, r.Schedule)
	}
	if r.Sequence != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, r.Sequence, 10)
	}
	for _, f := range [...]struct {
		name string
		t    time.Time
	}{
		{`,"enqueued_at":`, r.EnqueuedAt},
		{`,"scheduled_for":`, r.ScheduledFor},
		{`,"started_at":`, r.StartedAt},
		{`,"finished_at":`, r.FinishedAt},
		{`,"next_attempt_at":`, r.NextAttemptAt},
	} {
		if !f.t.IsZero() {
			b = append(b, f.name...)
			b = jsonw.Time(b, f.t)
		}
	}
	b = append(b, `,"updated_at":`...)
	b = jsonw.Time(b, r.UpdatedAt)
	if !r.Progress.IsZero() {
		b = append(b, `,"progress":{"done":`...)
		b = strconv.AppendInt(b, r.Progress.Done, 10)
		if r.Progress.Total != 0 {
			b = append(b, `,"total":`...)
			b = strconv.AppendInt(b, r.Progress.Total, 10)
		}
		if r.Progress.Message != "" {
			b = append(b, `,"message":`...)
			b = jsonw.String(b, r.Progress.Message)
		}
		b = append(b, '}')
	}
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = jsonw.Raw(b, r.Result)
	}
	return append(b, '}')
}
