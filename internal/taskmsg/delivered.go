package taskmsg

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/textcut"
)

// Everything a worker reads from a task message was written by whoever could
// publish on the task subjects, not necessarily by a jetflow client. The
// task ID in particular becomes part of KV keys and subjects (state records,
// the effects ledger, workflow steps): a 4 KB ID would exceed the server's
// control line and make nats.go close the connection for good. So the ID is
// validated before anything uses it ([DeliveredID]); an invalid one is
// replaced by [SeqID] and the caller dead-letters the task.
//
// A valid ID is not enough: a task no schedule fired (no [HeaderScheduler],
// which only the server sets) claims only the ID the server deduplicated it
// by ([IdentityProblem]), and a task a schedule fired must come from one of
// the deployment's schedules ([CheckFired]).

// MaxScheduleLead is how far a delayed task's due time ([HeaderScheduledFor])
// may lie after the time the server stored the task on its work subject.
// The server fires a schedule at its due time, give or take the few hundred
// milliseconds the worker holds an early task for, and both times come from
// the server's clock, so clock skew between hosts does not matter. A larger
// lead means the header does not belong to the message (corrupt, or
// hand-made and published straight to the work subject): holding the task
// until then would pin a worker slot for nothing.
const MaxScheduleLead = time.Minute

// ScheduleNames names a deployment's schedule subjects (streams.Names):
// "<prefix>.sched.<id>" for a delayed task, "<prefix>.cron.<name>" for a
// repeating schedule.
type ScheduleNames interface {
	ScheduleSubject(id string) string
	CronSubject(name string) string
}

// DeliveredID returns the task ID of a delivered task with headers h, stored
// at stream sequence seq and enqueued at stamp. When a header that carries
// the ID is not a valid ID (valid, which is streams.ValidateID, fails or it
// is longer than [MaxIDLen]), when the task may not claim it
// ([IdentityProblem]), or when names is not nil and the task was fired by no
// schedule of names ([CheckFired]), it returns [SeqID] and an error saying
// why, quoting no more than a short prefix of a header. A task published
// without any ID header (with the nats CLI, say) gets [SeqID] and no error.
func DeliveredID(h nats.Header, seq uint64, stamp time.Time, valid func(string) error, names ScheduleNames) (string, error) {
	src := IDSourceOf(h, stamp)
	if src.Header == "" {
		return SeqID(seq), nil
	}
	if err := checkWireID(src.Header, src.Value, valid); err != nil {
		return SeqID(seq), err
	}
	if src.Problem != "" {
		// A producer chose another task's ID (or a cron tick's) without
		// its message ID: running it would let it skip or forge that
		// task's effects.
		return SeqID(seq), errors.New(src.Problem)
	}
	if names != nil {
		if err := CheckFired(names, h); err != nil {
			return SeqID(seq), err
		}
	}
	return src.ID, nil
}

// checkWireID validates the value v of header k as a task ID or schedule
// name, without quoting more than a short prefix of it in the error.
func checkWireID(k, v string, valid func(string) error) error {
	if len(v) > MaxIDLen {
		return fmt.Errorf("header %s is %d bytes (%q…), the limit is %d", k, len(v), textcut.Cut(v, 32), MaxIDLen)
	}
	if err := valid(v); err != nil {
		return fmt.Errorf("header %s: %w", k, err)
	}
	return nil
}

// CheckFired validates a task a schedule fired, named by the
// [HeaderScheduler] header the server sets (a publish cannot set it on the
// task stream); it returns nil for a task without it. A delayed task's
// schedule lives on names.ScheduleSubject(id) and its task ID must be that
// id, not a [ReservedID]: otherwise whoever wrote the schedule chose another
// task's ID (its state record, effects ledger and workflow step). A cron
// tick's schedule name must be the one of its names.CronSubject(name)
// subject. A schedule anywhere else is not one of this deployment's.
func CheckFired(names ScheduleNames, h nats.Header) error {
	scheduler := h.Get(HeaderScheduler)
	if scheduler == "" {
		return nil
	}
	if id, ok := strings.CutPrefix(scheduler, names.ScheduleSubject("")); ok {
		if v := h.Get(HeaderTaskID); v != "" && v != id {
			return fmt.Errorf("fired by schedule %s but carries task ID %q", textcut.Cut(scheduler, 200), textcut.Cut(v, 32))
		}
		if ReservedID(id) {
			// A delayed task under a cron tick's ID, which any producer
			// allowed to delay tasks could predict.
			return fmt.Errorf("delayed task %q has an ID reserved for the ticks of repeating schedules", textcut.Cut(id, 32))
		}
		return nil
	}
	if name, ok := strings.CutPrefix(scheduler, names.CronSubject("")); ok {
		if v := h.Get(HeaderSchedule); v != "" && v != name {
			return fmt.Errorf("fired by schedule %s but names schedule %q", textcut.Cut(scheduler, 200), textcut.Cut(v, 32))
		}
		return nil
	}
	return fmt.Errorf("fired by %q, which is not a schedule subject", textcut.Cut(scheduler, 200))
}

// CheckDue validates the due time v of a delivered task ([HeaderScheduledFor])
// against stored, when the server stored the task on its work subject (zero
// when unknown: nothing to compare with). It returns an error for a v that is
// not an RFC 3339 time or lies more than [MaxScheduleLead] after stored.
func CheckDue(v string, stored time.Time) error {
	due, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		// The parse error quotes the whole value: leave it out.
		return fmt.Errorf("header %s %q (%d bytes) is not an RFC 3339 time", HeaderScheduledFor, textcut.Cut(v, 64), len(v))
	}
	if stored.IsZero() {
		return nil
	}
	if lead := due.Sub(stored); lead > MaxScheduleLead {
		return fmt.Errorf("header %s is %s, %v after the server stored the task on its work subject (%s); a schedule never fires that early",
			HeaderScheduledFor, textcut.Cut(v, 64), lead.Round(time.Second), stored.UTC().Format(time.RFC3339Nano))
	}
	return nil
}
