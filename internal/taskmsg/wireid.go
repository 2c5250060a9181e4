package taskmsg

import (
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
}

// IDSourceOf returns where the identity of a task with headers h, stored (or
// enqueued) at stamp, comes from. Unlike [ID] it does not validate, so that
// the caller can report which header was invalid.
func IDSourceOf(h nats.Header, stamp time.Time) IDSource {
	for _, k := range []string{HeaderTaskID, jetstream.MsgIDHeader} {
		if v := h.Get(k); v != "" {
			return IDSource{Header: k, Value: v, ID: v}
		}
	}
	if f, ok := FireOf(h, stamp); ok {
		return IDSource{Header: HeaderSchedule, Value: f.Name, ID: CronID(f.Name, f.Time)}
	}
	return IDSource{}
}
