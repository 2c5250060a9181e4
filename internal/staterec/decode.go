package staterec

import (
	"encoding/json"
	"time"

	"github.com/jetflow-io/jetflow/streams"
)

// HeaderAwaited marks a task enqueued to be awaited (framework.Awaited):
// its worker writes its final record even where state tracking is off for
// its type, and a cancellation writes its "cancelled" record.
const HeaderAwaited = "Jetflow-Awaited"

// Decode reads a record from its JSON as encoding/json reads it into
// framework.TaskRecord: the same keys (matched without regard to case),
// into fields of the same types. A priority that is not one of the four
// names, a time that is not RFC 3339, or a value of another JSON type
// fails it; a progress that breaks [CheckProgress], or is not a progress
// at all, reads as none ([Progress.UnmarshalJSON]). Revision is left zero.
func Decode(data []byte) (Record, error) {
	// Named as framework's type, so that a decoding error names the same
	// struct ("Go struct field TaskRecord.attempt").
	type TaskRecord struct {
		ID            string           `json:"id"`
		Type          string           `json:"type"`
		Priority      streams.Priority `json:"priority"`
		State         string           `json:"state"`
		Attempt       int              `json:"attempt"`
		MaxAttempts   int              `json:"max_attempts"`
		Error         string           `json:"error"`
		Schedule      string           `json:"schedule"`
		Sequence      uint64           `json:"seq"`
		EnqueuedAt    time.Time        `json:"enqueued_at"`
		ScheduledFor  time.Time        `json:"scheduled_for"`
		StartedAt     time.Time        `json:"started_at"`
		FinishedAt    time.Time        `json:"finished_at"`
		NextAttemptAt time.Time        `json:"next_attempt_at"`
		UpdatedAt     time.Time        `json:"updated_at"`
		Progress      Progress         `json:"progress"`
		Result        json.RawMessage  `json:"result"`
	}
	var w TaskRecord
	if err := json.Unmarshal(data, &w); err != nil {
		return Record{}, err
	}
	return Record{ID: w.ID, Type: w.Type, Priority: w.Priority.String(), State: w.State,
		Attempt: w.Attempt, MaxAttempts: w.MaxAttempts, Error: w.Error, Schedule: w.Schedule, Sequence: w.Sequence,
		EnqueuedAt: w.EnqueuedAt, ScheduledFor: w.ScheduledFor, StartedAt: w.StartedAt, FinishedAt: w.FinishedAt,
		NextAttemptAt: w.NextAttemptAt, UpdatedAt: w.UpdatedAt, Progress: w.Progress, Result: w.Result}, nil
}

// UnmarshalJSON decodes a progress read from a record. A record is data
// anyone allowed to write the state bucket may have forged: a value that
// breaks the rules [CheckProgress] enforces, or is not a progress at all,
// decodes as the zero Progress (none) rather than failing the whole
// record. It never returns an error.
func (p *Progress) UnmarshalJSON(b []byte) error {
	var raw struct {
		Done    int64  `json:"done"`
		Total   int64  `json:"total"`
		Message string `json:"message"`
	}
	*p = Progress{}
	if json.Unmarshal(b, &raw) != nil {
		return nil
	}
	if v := Progress(raw); CheckProgress(v) == nil {
		*p = v
	}
	return nil
}
