package taskmsg

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// IDSource is where a delivered task's identity comes from.
type IDSource struct {
	// Header is the header that carries it: [HeaderTaskID], the message ID
	// header, or [HeaderSchedule] for a task fired by a repeating schedule;
	// "" for a task published without any (its ID is then [SeqID]).
	Header string
	// Value is that header's value, unvalidated: the caller validates it
	// before it becomes part of a key or subject.
	Value string
	// ID is the task ID Value gives: Value itself, or the tick's [CronID].
	ID string
	// Problem, when not "", says why the task may not claim ID although
	// Value may be a valid ID ([IdentityProblem]); values are quoted
	// short and in ASCII.
	Problem string
}

// IDSourceOf returns where the identity of a task with headers h, stored (or
// enqueued) at stamp, comes from. Unlike [ID] it does not validate the
// value, so that the caller can report which header was invalid; the rules
// of [IdentityProblem] are in Problem.
func IDSourceOf(h nats.Header, stamp time.Time) IDSource {
	for _, k := range []string{HeaderTaskID, jetstream.MsgIDHeader} {
		if v := h.Get(k); v != "" {
			return IDSource{Header: k, Value: v, ID: v, Problem: IdentityProblem(h, v)}
		}
	}
	if f, ok := FireOf(h, stamp); ok {
		return IDSource{Header: HeaderSchedule, Value: f.Name, ID: CronID(f.Name, f.Time)}
	}
	return IDSource{}
}

// IdentityProblem returns why a task with headers h may not claim the task
// ID id read from them, or "" when it may. The server sets [HeaderScheduler]
// on a task a schedule fired, and refuses a publish that sets it on the task
// stream, so only the writers of the schedule stream (workers' delay
// movers, cron registration, dead-letter replays) can make a task that
// carries it. Any other task is what its producer published, and:
//
//   - its [HeaderTaskID], when set, must equal its Nats-Msg-Id: the server
//     drops duplicates by Nats-Msg-Id, so a task whose Jetflow-Id differs
//     would run as another task (its effects ledger, state record, workflow
//     step) without being a duplicate of it;
//   - its ID must not start with [CronIDPrefix]: those are the IDs of the
//     ticks of repeating schedules, which a producer could predict and
//     pre-empt.
//
// Whether id is a valid ID at all ([SafeID]) is the caller's check.
func IdentityProblem(h nats.Header, id string) string {
	if h.Get(HeaderScheduler) != "" {
		return ""
	}
	if own := h.Get(HeaderTaskID); own != "" {
		if msgID := h.Get(jetstream.MsgIDHeader); msgID != own {
			return "header " + HeaderTaskID + " " + Quote(own) + " differs from " + jetstream.MsgIDHeader + " " + Quote(msgID) +
				" on a task no schedule fired"
		}
	}
	if ReservedID(id) {
		return "task ID " + Quote(id) + " starts with " + `"` + CronIDPrefix + `"` + ", reserved for the ticks of repeating schedules, on a task no schedule fired"
	}
	return ""
}

// ReservedID reports whether id is reserved for tasks that schedules fire:
// it starts with [CronIDPrefix]. A client refuses such an ID at enqueue.
func ReservedID(id string) bool { return strings.HasPrefix(id, CronIDPrefix) }
