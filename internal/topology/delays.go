package topology

import (
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// DelayTopology returns the names and subjects the delay mover works on,
// derived from n. It is for jetflow's own packages (framework): its type
// is internal.
func DelayTopology(n streams.Names) delays.Topology {
	return delays.Topology{
		DelayStream: n.DelayStream(), ScheduleStream: n.ScheduleStream(), Consumer: streamdefs.DelayConsumerConfig(n),
		ParseSubject: n.ParseDelaySubject, ScheduleSubject: n.ScheduleSubject, DelaySubject: n.DelaySubject,
		Target: func(raw string) (string, string, string, error) {
			p, typ, err := n.ParseFiredSubject(raw)
			if err != nil {
				return "", "", "", err
			}
			// The partition the producer chose is kept (any partition's
			// staging subject: the schedule stream refuses one of a
			// partition the deployment does not have).
			return n.Partition(n.SubjectPartition(raw)).FiredSubject(p, typ), p.String(), typ, nil
		},
	}
}

// Pending is what a delayed task waiting in the delay or the schedule
// stream says of itself, read by [ParsePending]. A field its headers
// do not give validly is zero.
type Pending struct {
	// Priority and Type come from the task's target; TargetErr is why
	// they could not be read (nil when they were).
	Priority  streams.Priority
	Type      string
	TargetErr error
	// Due is when the task is due: its Jetflow-Scheduled-For header, or the
	// "@at" time of its schedule.
	Due time.Time
	// EnqueuedAt is its Jetflow-Enqueued-At header.
	EnqueuedAt time.Time
}

// ParsePending reads the headers of a pending delayed task (a message of
// the delay or the schedule stream of n), validating what it reads: they
// come from the wire.
func ParsePending(n streams.Names, h nats.Header) Pending {
	var p Pending
	p.Priority, p.Type, p.TargetErr = n.ParseScheduleTarget(taskmsg.ScheduleTarget(h))
	if p.TargetErr != nil {
		p.Priority, p.Type = 0, ""
	}
	parse := func(v string) time.Time {
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}
		}
		return ts
	}
	p.EnqueuedAt = parse(h.Get(taskmsg.HeaderEnqueuedAt))
	if p.Due = parse(h.Get(taskmsg.HeaderScheduledFor)); p.Due.IsZero() {
		if at, ok := strings.CutPrefix(h.Get(jetstream.ScheduleHeader), "@at "); ok {
			p.Due = parse(at)
		}
	}
	return p
}
