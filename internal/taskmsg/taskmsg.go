package taskmsg

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/cronexpr"
)

// Headers jetflow sets on task messages; package framework exports them.
const (
	HeaderTaskID       = "Jetflow-Id"
	HeaderEnqueuedAt   = "Jetflow-Enqueued-At"
	HeaderScheduledFor = "Jetflow-Scheduled-For"
	HeaderEncoding     = "Jetflow-Encoding"

	// Set on a repeating schedule's message; the server copies them onto
	// every task it fires.
	HeaderSchedule     = "Jetflow-Schedule"
	HeaderScheduleSpec = "Jetflow-Schedule-Spec"
	HeaderScheduleZone = "Jetflow-Schedule-Zone"
	HeaderScheduleHash = "Jetflow-Schedule-Hash"

	// HeaderScheduleTarget is the staging subject a delayed task asks to
	// fire into, on its way through the delay stream; the mover validates
	// it and derives the schedule's target from it.
	HeaderScheduleTarget = "Jetflow-Schedule-Target"

	// Set by the server on a task it fired from a schedule.
	HeaderScheduler    = "Nats-Scheduler"
	HeaderScheduleNext = "Nats-Schedule-Next"
)

// EncodingRaw is the encoding header value of a payload given as bytes.
const EncodingRaw = "raw"

// Spec describes a task message to build.
type Spec struct {
	// Target is the work subject.
	Target string
	// ID is the task ID; "" with Anonymous publishes without a
	// Nats-Msg-Id (the ID becomes SeqID of the stored sequence).
	ID        string
	Anonymous bool
	// Encoding is the payload codec's name, "" for JSON.
	Encoding string
	// Headers are the caller's custom headers.
	Headers map[string]string
	// Data is the encoded payload.
	Data []byte
	// Due, when after Now, makes a delayed task: the message goes to
	// DelaySubject, where a worker's mover turns it into a server-side
	// schedule ([DelayedSchedule]) that publishes it to ScheduleTarget (the
	// staging subject the task stream sources onto Target) at Due.
	Due, Now                     time.Time
	DelaySubject, ScheduleTarget string
}

// Build returns the message of s and whether it is delayed.
func Build(s Spec) (*nats.Msg, bool) {
	m, _ := BuildSized(&s)
	return m, s.Due.After(s.Now)
}

// BuildSized returns the message of s and its [Size], counted while the
// headers are set (cheaper than iterating over them afterwards). s is a
// pointer to keep the builder's frame small (enqueue.Builder.Build).
func BuildSized(s *Spec) (*nats.Msg, int64) {
	hdr := make(nats.Header, 4+len(s.Headers))
	size := len(s.Data) + len(hdrFraming)
	set := func(k, v string) {
		for _, old := range hdr[k] {
			size -= len(k) + len(old) + 4
		}
		hdr[k] = []string{v}
		size += len(k) + len(v) + 4
	}
	if !s.Anonymous {
		set(jetstream.MsgIDHeader, s.ID)
	}
	if s.Encoding != "" {
		set(HeaderEncoding, s.Encoding)
	}
	for k, v := range s.Headers {
		set(k, v)
	}
	subject := s.Target
	if s.Due.After(s.Now) {
		subject = s.DelaySubject
		set(HeaderScheduleTarget, s.ScheduleTarget)
		set(HeaderTaskID, s.ID)
		set(HeaderScheduledFor, FormatTime(s.Due))
		set(HeaderEnqueuedAt, FormatTime(s.Now))
	}
	if len(hdr) == 0 {
		hdr = nil // no header block at all
	}
	return &nats.Msg{Subject: subject, Data: s.Data, Header: hdr}, int64(size)
}

// DelayedSchedule returns the message of the one-shot schedule of a delayed task
// with ID id, due at due, firing into target, stored on subject: the
// payload data and the caller's headers h without any "Nats-" header (h
// is untrusted: read from the delay stream), with the schedule headers set
// here.
func DelayedSchedule(subject, target, id string, due time.Time, h map[string][]string, data []byte) *nats.Msg {
	hdr := make(nats.Header, len(h)+4)
	for k, v := range h {
		if len(k) >= 5 && strings.EqualFold(k[:5], "nats-") || k == HeaderScheduleTarget {
			continue
		}
		hdr[k] = v
	}
	at := FormatTime(due)
	hdr[jetstream.MsgIDHeader] = []string{id}
	// Set by hand: jetstream.WithScheduleAt truncates to whole seconds,
	// which would fire up to 1 s early.
	hdr[jetstream.ScheduleHeader] = []string{"@at " + at}
	hdr[jetstream.ScheduleTargetHeader] = []string{target}
	hdr[HeaderTaskID] = []string{id}
	hdr[HeaderScheduledFor] = []string{at}
	return &nats.Msg{Subject: subject, Data: data, Header: hdr}
}

// MaxDue is the last due time a server's message schedule can hold: the
// server keeps a schedule's time in Unix nanoseconds, which wrap after it.
var MaxDue = time.Unix(0, math.MaxInt64).UTC()

// FormatTime formats t as jetflow's time headers do: RFC 3339 with
// nanoseconds, in UTC.
func FormatTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ParseTime parses a time header; the zero time if it is missing or bad.
func ParseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

// Size returns the bytes m counts against the server's max payload: its
// header block and its data.
func Size(m *nats.Msg) int64 {
	n := len(m.Data) + len(hdrFraming)
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// hdrFraming is what Size counts for the header block besides the
// headers.
const hdrFraming = "NATS/1.0\r\n\r\n"

// SeqID is the ID of a task stored at seq without an ID of its own.
func SeqID(seq uint64) string { return "seq-" + strconv.FormatUint(seq, 10) }

// ID returns the ID of the task stored at seq with headers h at time
// stamp: its own ID, the ID of the tick that fired it, or [SeqID].
//
// IDs come from the wire and become parts of keys and subjects: an ID
// header that is not a valid ID (see [SafeID]), or an ID the task may not
// claim ([IdentityProblem]), gives SeqID(seq) instead, as the worker does.
func ID(h nats.Header, seq uint64, stamp time.Time) string {
	if h != nil {
		for _, k := range []string{HeaderTaskID, jetstream.MsgIDHeader} {
			if id := h.Get(k); id != "" {
				if !SafeID(id) || IdentityProblem(h, id) != "" {
					return SeqID(seq)
				}
				return id
			}
		}
		if f, ok := FireOf(h, stamp); ok {
			if !SafeID(f.Name) {
				return SeqID(seq)
			}
			return CronID(f.Name, f.Time)
		}
	}
	return SeqID(seq)
}

// MaxIDLen is the longest valid task ID or schedule name, in bytes
// (streams.ValidateID checks it too).
const MaxIDLen = 128

// SafeID reports whether id is a valid task ID or schedule name: 1 to
// [MaxIDLen] bytes of ASCII letters, digits, '_', '-', '=' or ':', the rule
// of streams.ValidateID.
func SafeID(id string) bool {
	if id == "" || len(id) > MaxIDLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-', c == '=', c == ':':
		default:
			return false
		}
	}
	return true
}

// Fire is the tick of a repeating schedule that enqueued a task.
type Fire struct {
	Name       string
	Time, Next time.Time
}

// FireOf returns the tick that fired the task with headers h, stored (or
// enqueued) at stamp, and false when a repeating schedule did not fire it.
//
// The nominal time is derived from the Nats-Schedule-Next header the server
// sets: the interval before it for "@every", the previous cron match for
// cron expressions. If that fails (a schedule written by other tools), it
// falls back to stamp truncated to the second.
func FireOf(h nats.Header, stamp time.Time) (Fire, bool) {
	name := h.Get(HeaderSchedule)
	if name == "" || h.Get(HeaderScheduler) == "" {
		return Fire{}, false
	}
	f := Fire{Name: name, Time: stamp.UTC().Truncate(time.Second)}
	next, err := time.Parse(time.RFC3339Nano, h.Get(HeaderScheduleNext))
	if err != nil {
		return f, true
	}
	f.Next = next.UTC()
	expr, err := cronexpr.Parse(h.Get(HeaderScheduleSpec))
	if err != nil {
		return f, true
	}
	if d, ok := expr.Every(); ok {
		f.Time = next.Add(-d).UTC()
		return f, true
	}
	loc := time.UTC
	if z := h.Get(HeaderScheduleZone); z != "" {
		l, err := LoadZone(z)
		if err != nil {
			return f, true
		}
		loc = l
	}
	if prev := expr.Prev(next, loc); !prev.IsZero() {
		f.Time = prev.UTC()
	}
	return f, true
}

// CronIDPrefix starts the ID of every task fired by a repeating schedule.
const CronIDPrefix = "cron-"

// CronID is the ID of the task fired by schedule name at tick fire:
// "cron-<name>-<YYYYMMDDThhmmssZ>". Ticks are at least a second apart, so
// it is unique per tick, and a duplicated delivery of a tick has the same
// ID.
func CronID(name string, fire time.Time) string {
	return CronIDPrefix + name + "-" + fire.UTC().Format("20060102T150405Z")
}

// ScheduleTarget returns the staging subject a delayed task fires into, from
// its schedule (Nats-Schedule-Target) or, while it waits in the delay
// stream, from [HeaderScheduleTarget]; "" if neither is set. The value is
// untrusted: parse it before use.
func ScheduleTarget(h nats.Header) string {
	if t := h.Get(jetstream.ScheduleTargetHeader); t != "" {
		return t
	}
	return h.Get(HeaderScheduleTarget)
}
