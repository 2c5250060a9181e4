package framework

import (
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Everything a worker reads from a task message was written by whoever could
// publish on the task subjects, not necessarily by a jetflow client. The
// task ID in particular becomes part of KV keys and subjects (state records,
// the effects ledger, workflow steps): a 4 KB ID would exceed the server's
// control line and make nats.go close the connection for good. So the ID is
// validated before anything uses it; an invalid one is replaced by a safe
// ID derived from the stream sequence ("seq-<n>") and the task is
// dead-lettered with reason "invalid" (package dlq's ReasonInvalid).
//
// A valid ID is not enough: a task no schedule fired (no Nats-Scheduler
// header, which only the server sets) claims only the ID the server
// deduplicated it by. Its Jetflow-Id, when set, must equal its Nats-Msg-Id,
// and its ID must not be a cron tick's ("cron-…"); otherwise it is
// dead-lettered the same way (taskmsg.IdentityProblem).

// taskIDFromWire returns the task ID of t read from its headers, and a
// permanent error wrapping [ErrCorruptTask] when a header that carries it
// is not a valid ID. The ID is then "seq-<sequence>". t's headers,
// Sequence and EnqueuedAt must be set.
func taskIDFromWire(t *Task) (string, error) {
	src := taskmsg.IDSourceOf(t.Headers, t.EnqueuedAt)
	if src.Header == "" {
		// Published without jetflow (for example with the nats CLI).
		return taskmsg.SeqID(t.Sequence), nil
	}
	if err := checkWireID(src.Header, src.Value); err != nil {
		return taskmsg.SeqID(t.Sequence), err
	}
	if src.Problem != "" {
		// A producer chose another task's ID (or a cron tick's) without
		// its message ID: running it would let it skip or forge that
		// task's effects.
		return taskmsg.SeqID(t.Sequence), Permanent(fmt.Errorf("%w: %s", ErrCorruptTask, src.Problem))
	}
	if t.worker != nil {
		if err := checkFired(t.worker.names, t.Headers); err != nil {
			return taskmsg.SeqID(t.Sequence), err
		}
	}
	return src.ID, nil
}

// checkFired validates a task a schedule fired, named by the Nats-Scheduler
// header the server sets (a publish cannot set it on the task stream). A
// delayed task's schedule lives on "<prefix>.sched.<id>" and its task ID
// must be that id: otherwise whoever wrote the schedule chose another
// task's ID (its state record, effects ledger and workflow step). A cron
// tick's schedule name must be the one of its "<prefix>.cron.<name>"
// subject. A schedule anywhere else is not one of this deployment's.
func checkFired(names streams.Names, h nats.Header) error {
	scheduler := h.Get(HeaderScheduler)
	if scheduler == "" {
		return nil
	}
	if id, ok := strings.CutPrefix(scheduler, names.ScheduleSubject("")); ok {
		if v := h.Get(HeaderTaskID); v != "" && v != id {
			return Permanent(fmt.Errorf("%w: fired by schedule %s but carries task ID %q", ErrCorruptTask, truncate(scheduler, 200), truncate(v, 32)))
		}
		if taskmsg.ReservedID(id) {
			// A delayed task under a cron tick's ID, which any producer
			// allowed to delay tasks could predict.
			return Permanent(fmt.Errorf("%w: delayed task %q has an ID reserved for the ticks of repeating schedules", ErrCorruptTask, truncate(id, 32)))
		}
		return nil
	}
	if name, ok := strings.CutPrefix(scheduler, names.CronSubject("")); ok {
		if v := h.Get(HeaderSchedule); v != "" && v != name {
			return Permanent(fmt.Errorf("%w: fired by schedule %s but names schedule %q", ErrCorruptTask, truncate(scheduler, 200), truncate(v, 32)))
		}
		return nil
	}
	return Permanent(fmt.Errorf("%w: fired by %q, which is not a schedule subject", ErrCorruptTask, truncate(scheduler, 200)))
}

// checkWireID validates the value v of header k as a task ID or schedule
// name, without quoting more than a short prefix of it in the error.
func checkWireID(k, v string) error {
	if len(v) > taskmsg.MaxIDLen {
		return Permanent(fmt.Errorf("%w: header %s is %d bytes (%q…), the limit is %d",
			ErrCorruptTask, k, len(v), truncate(v, 32), taskmsg.MaxIDLen))
	}
	if err := streams.ValidateID(v); err != nil {
		return Permanent(fmt.Errorf("%w: header %s: %w", ErrCorruptTask, k, err))
	}
	return nil
}

// checkDelivered validates what execute needs before running t: the ID
// (checked when the task was read) and the due time.
func checkDelivered(t *Task, msg jetstream.Msg) error {
	if t.wireErr != nil {
		return t.wireErr
	}
	return checkSchedule(t, msg)
}
