package framework

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// A worker validates what it reads from a task message before anything uses
// it (internal/taskmsg, DeliveredID and CheckDue): a task whose ID headers or
// due time cannot be trusted gets the ID "seq-<n>" and is dead-lettered with
// reason "invalid" (package dlq's ReasonInvalid).

// taskIDFromWire returns the task ID of t read from its headers, and a
// permanent error wrapping [ErrCorruptTask] when a header that carries it
// is not a valid ID. The ID is then "seq-<sequence>". t's headers,
// Sequence and EnqueuedAt must be set.
func taskIDFromWire(t *Task) (string, error) {
	var names taskmsg.ScheduleNames // the worker's schedules fire its tasks
	if t.worker != nil {
		names = &t.worker.names
	}
	id, err := taskmsg.DeliveredID(t.Headers, t.Sequence, t.EnqueuedAt, streams.ValidateID, names)
	return id, corrupt(err)
}

// checkDelivered validates what execute needs before running t: the ID
// (checked when the task was read) and the due time, against the time the
// server stored the message.
func checkDelivered(t *Task, msg jetstream.Msg) error {
	if t.wireErr != nil {
		return t.wireErr
	}
	v := t.Header(HeaderScheduledFor)
	if v == "" {
		return nil
	}
	var stored time.Time
	if md, err := msg.Metadata(); err == nil {
		stored = md.Timestamp
	}
	return corrupt(taskmsg.CheckDue(v, stored))
}

// corrupt returns a permanent error wrapping [ErrCorruptTask] and err, nil
// for a nil err.
func corrupt(err error) error {
	if err == nil {
		return nil
	}
	return Permanent(fmt.Errorf("%w: %w", ErrCorruptTask, err))
}
