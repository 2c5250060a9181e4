package fleet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/textcut"
)

// HeaderPayloadVersion is the header that carries a task's payload
// version; package framework exports it.
const HeaderPayloadVersion = "Jetflow-Payload-Version"

// ParseVersion reads a payload version header from the wire: "" is
// version 1; anything but the decimal digits of 1 to MaxPayloadVersion
// (no sign, no leading zero) is an error.
func ParseVersion(s string) (int, error) {
	if s == "" {
		return 1, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 || v > MaxPayloadVersion || strconv.Itoa(v) != s {
		return 0, fmt.Errorf("header %s is %q, not a version from 1 to %d", HeaderPayloadVersion, textcut.Cut(s, 16), MaxPayloadVersion)
	}
	return v, nil
}

// Verdict is what a worker does with a delivered task, given its payload
// version.
type Verdict int

const (
	// Run: the handler accepts the version.
	Run Verdict = iota
	// Corrupt: the version header is not a version; the task fails for
	// good.
	Corrupt
	// NoWorker: no live worker accepted the version within the grace; the
	// task is dead-lettered.
	NoWorker
	// Back: the task is handed back ([Gate.HandBack]) to come again after
	// the decision's delay.
	Back
)

// Gate is a worker's side of payload versions: the versions it handed
// back (Refused, which its registry record lists), its kept read of the
// registry, and the verdict on each delivered task of a type that declares
// the versions it accepts. The zero value is not usable: set Grace,
// Interval and List.
type Gate struct {
	// Refused are the versions this worker handed back.
	Refused Refusals
	// Grace is how long a version no live worker accepts keeps coming
	// back before it is dead-lettered; Interval how old a registry read
	// may be; List reads the registry.
	Grace    time.Duration
	Interval time.Duration
	List     func() (*Listing, error)
	// ListFailed is told when the registry cannot be read (the grace then
	// decides); nil: nobody is.
	ListFailed func(typ string, v int, err error)

	served Served
}

// Check returns the verdict on a task of typ with headers h, whose handler
// accepts the sorted versions accepted, at now. With Back, the decision
// says when the task comes back and what it carries; with Corrupt and
// NoWorker, the error says why the task fails.
func (g *Gate) Check(accepted []int, typ string, h nats.Header, now time.Time) (Verdict, HandBack, error) {
	v, err := ParseVersion(h.Get(HeaderPayloadVersion))
	if err != nil {
		return Corrupt, HandBack{}, err
	}
	if _, ok := slices.BinarySearch(accepted, v); ok {
		return Run, HandBack{}, nil
	}
	g.Refused.Note(typ, v, now)
	d := Unaccepted{
		Since:  taskmsg.ParseTime(h.Get(taskmsg.HeaderVersionRefusedSince)),
		Count:  h.Get(taskmsg.HeaderVersionRefusals),
		Served: g.accepted(typ, v),
	}.Decide(g.Grace, now)
	if d.DeadLetter {
		return NoWorker, d, fmt.Errorf("version %d of task type %s, handed back %d times since %s (this worker accepts %v)",
			v, typ, d.Count, d.Since.UTC().Format(time.RFC3339), accepted)
	}
	return Back, d, nil
}

// accepted reports whether a live worker of the registry accepts version v
// of typ; false when the registry cannot be read.
func (g *Gate) accepted(typ string, v int) bool {
	ok, err := g.served.Accepts(typ, v, g.Interval, g.List)
	if err != nil && g.ListFailed != nil {
		g.ListFailed(typ, v, err)
	}
	return ok
}

// ErrPendingSchedule is returned by [StoreHandBack] when the task already
// has a pending schedule.
var ErrPendingSchedule = errors.New("the task already has a pending schedule")

// StoreHandBack stores the hand-back b in stream, the schedule stream, as
// the first message of its subject: a task that already has a pending
// schedule gets [ErrPendingSchedule].
func StoreHandBack(ctx context.Context, js jetstream.JetStream, stream string, b *taskmsg.HandBack) error {
	_, err := js.PublishMsg(ctx, b.Msg(), jetstream.WithExpectStream(stream), jetstream.WithExpectLastSequencePerSubject(0))
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence {
		return fmt.Errorf("task %s: %w", b.ID, ErrPendingSchedule)
	}
	return err
}
