package schedule

import (
	"errors"
	"strconv"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// ErrInvalid wraps every error about a schedule definition: its name,
// expression, time zone, task type, priority or headers.
var ErrInvalid = errors.New("schedule: invalid schedule")

// Definition declares a repeating schedule: which task to enqueue, and when.
type Definition struct {
	// Name identifies the schedule; it is a subject token (A-Z a-z 0-9 _ - =
	// :, at most 128 bytes). Required.
	Name string
	// Spec says when the task is enqueued. Required. Accepted forms:
	// six cron fields with seconds ("0 30 9 * * mon-fri"), the common five
	// fields without seconds ("30 9 * * mon-fri", which fires at second 0),
	// "@every <duration>" (a whole number of seconds, at least 1 s), and
	// @yearly, @monthly, @weekly, @daily and @hourly.
	Spec string
	// TimeZone is the IANA time zone cron fields are evaluated in, for
	// example "Europe/Paris". Default UTC. It cannot be combined with
	// "@every", which the server rejects.
	TimeZone string
	// Type is the task type to enqueue. Required.
	Type string
	// Payload is the task payload, encoded with the client's codec like
	// [framework.Client.Enqueue] does. The same payload is sent at every
	// tick.
	Payload any
	// Priority is the task's priority. Default [framework.PriorityNormal].
	Priority framework.Priority
	// Headers are custom headers set on every task. Keys starting with
	// "Nats-" or "Jetflow-" are reserved.
	Headers map[string]string
}

// Info describes a stored schedule.
type Info struct {
	// Name, Spec, TimeZone, Type and Priority are the schedule's definition.
	Name     string
	Spec     string
	TimeZone string
	Type     string
	Priority framework.Priority
	// Subject holds the schedule, for example "jetflow.cron.nightly".
	Subject string
	// Target is the work subject the fired task runs on (the schedule
	// itself targets the staging subject the task stream sources it from).
	Target string
	// Payload is the encoded payload; Headers are the custom headers.
	Payload []byte
	Headers map[string]string
	// Sequence is the schedule message's sequence in the schedule stream.
	Sequence uint64
	// Stored is when this definition was stored.
	Stored time.Time
	// Next is the next fire time, computed on the client. For cron
	// expressions it is exact. For "@every" it assumes the phase set when
	// the schedule was stored; after a server restart the server restarts
	// the interval from its start-up, so the real tick may be earlier.
	// It is zero for a schedule that no longer fires (see Broken).
	Next time.Time
	// Broken is empty for a schedule the server fires as [Manager.Register]
	// wrote it. Otherwise it says why not: the last message on Subject is
	// not a schedule (the server then dropped the schedule, and it never
	// fires again), or it is a schedule jetflow did not write (its name,
	// expression or fingerprint headers do not match what it fires). The
	// definition fields then describe the last schedule stored on Subject,
	// when one is left (Name and Subject alone when none is).
	// [Manager.Register] of the definition restores it; [Manager.Remove]
	// deletes it.
	Broken string
	// BrokenAt is when the message that broke the schedule was stored;
	// zero when Broken is empty.
	BrokenAt time.Time
}

// LastFire returns the schedule's latest tick at or before now that came
// after the definition was stored, computed from the spec like
// [Info.Next]; zero when it has not ticked since it was stored (or the spec
// cannot be parsed). It is when the server last published the task, unless
// the server was down at that moment. A schedule that no longer fires (Broken
// set, Next zero) last fired at or before BrokenAt.
func (s Info) LastFire(now time.Time) time.Time {
	next := s.Next
	if next.IsZero() && !s.BrokenAt.IsZero() {
		if now.After(s.BrokenAt) {
			now = s.BrokenAt
		}
		next = taskmsg.NextFire(s.Spec, s.TimeZone, s.Stored, now)
	}
	return taskmsg.LastFire(s.Spec, s.TimeZone, s.Stored, next, now)
}

// Result says what [Manager.Register] did.
type Result int

// Results of [Manager.Register].
const (
	// Unchanged: an identical definition was stored already; its timing
	// was left alone.
	Unchanged Result = iota
	// Created: the schedule did not exist.
	Created
	// Updated: the schedule existed with another definition, which was
	// replaced.
	Updated
	// Restored: the schedule's subject did not end with a schedule jetflow
	// wrote ([Info.Broken]): the server had dropped the schedule, or
	// another tool had replaced it. The definition was stored again.
	Restored
)

// String returns "unchanged", "created", "updated" or "restored".
func (r Result) String() string {
	switch r {
	case Unchanged:
		return "unchanged"
	case Created:
		return "created"
	case Updated:
		return "updated"
	case Restored:
		return "restored"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}
