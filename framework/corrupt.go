package framework

import (
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// maxScheduleLead is how far a delayed task's due time (header
// Jetflow-Scheduled-For) may lie after the time the server stored the task
// on its work subject. The server fires a schedule at its due time, give or
// take the few hundred milliseconds the worker holds an early task for, and
// both times come from the server's clock, so clock skew between hosts does
// not matter. A larger lead means the header does not belong to the message
// (corrupt, or hand-made and published straight to the work subject): holding
// the task until then would pin a worker slot for nothing.
const maxScheduleLead = time.Minute

// checkSchedule validates the due time of a delivered task against the
// message's stream timestamp. It returns a permanent error wrapping
// [ErrCorruptTask] for a due-time header that is not an RFC 3339 time or
// lies more than [maxScheduleLead] after the delivery.
func checkSchedule(t *Task, msg jetstream.Msg) error {
	v := t.Header(HeaderScheduledFor)
	if v == "" {
		return nil
	}
	due, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		// The parse error quotes the whole value: leave it out.
		return Permanent(fmt.Errorf("%w: header %s %q (%d bytes) is not an RFC 3339 time",
			ErrCorruptTask, HeaderScheduledFor, truncate(v, 64), len(v)))
	}
	md, err := msg.Metadata()
	if err != nil || md.Timestamp.IsZero() {
		return nil // nothing to compare with; hold until due as usual
	}
	if lead := due.Sub(md.Timestamp); lead > maxScheduleLead {
		return Permanent(fmt.Errorf("%w: header %s is %s, %v after the server stored the task on its work subject (%s); a schedule never fires that early",
			ErrCorruptTask, HeaderScheduledFor, truncate(v, 64), lead.Round(time.Second), md.Timestamp.UTC().Format(time.RFC3339Nano)))
	}
	return nil
}
