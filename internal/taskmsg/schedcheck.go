package taskmsg

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/cronexpr"
	"github.com/jetflow-io/jetflow/internal/textcut"
)

// A schedule subject holds one message per schedule: the server rolls up
// the subject when it stores a schedule. Any other message stored there
// later, for example a server's answer sent to a reply subject a producer
// chose ("jetflow.cron.<name>" as the reply of a permitted publish or API
// request), makes the server drop the schedule: it never fires again, also
// after a restart, while the schedule's own message stays in the stream
// before it. What a schedule subject holds is therefore decided by its last
// message, and the checks below say whether that message is a schedule
// jetflow wrote.

// HeaderReplayedFromSeq is set on a replayed task: the sequence of the
// dead-letter record it was replayed from (package deadletter re-exports
// it).
const HeaderReplayedFromSeq = "Jetflow-Replayed-From-Seq"

// ReplayInFlight reports whether h is the one-shot schedule of a dead-letter
// replay: a dead-letter replay reaches the task stream through an "@at"
// schedule on a cron subject, so that the server marks the fired task with
// Nats-Scheduler (which keeps its task ID unforgeable).
func ReplayInFlight(h nats.Header) bool {
	return strings.HasPrefix(h.Get(jetstream.ScheduleHeader), "@at ") && h.Get(HeaderReplayedFromSeq) != ""
}

// quotedBytes is how many bytes of a message that is not a schedule a
// reason quotes.
const quotedBytes = 48

// NotScheduleReason describes a message stored on a schedule subject that
// is not a schedule (it has no Nats-Schedule header): its size and its first
// bytes, quoted in ASCII so that a terminal or a log shows them as they are.
func NotScheduleReason(data []byte) string {
	return fmt.Sprintf("replaced by a message that is not a schedule (no Nats-Schedule header; %d bytes: %s)",
		len(data), Quote(string(data)))
}

// CronProblem returns why the message stored last on the subject of the
// repeating schedule called name, with headers h and payload data, is not a
// schedule jetflow wrote, or "" when it is one: it has a Nats-Schedule
// header with an expression jetflow parses, [HeaderSchedule] equal to name,
// [HeaderScheduleSpec] and [HeaderScheduleZone] equal to the server's
// headers, and a [HeaderScheduleHash] that is the fingerprint of everything
// the schedule fires with ([BuildSchedule]). The fingerprint proves no
// origin (anyone who may publish on the subject can compute it); it proves
// that the stored definition is whole, as Register wrote it.
//
// Its target (Nats-Schedule-Target) must be one taskTarget accepts.
// Every value read from h is untrusted: a reason quotes at most a few dozen
// bytes of it, in ASCII.
func CronProblem(name string, h nats.Header, data []byte, taskTarget func(string) bool) string {
	spec := h.Get(jetstream.ScheduleHeader)
	if spec == "" {
		return NotScheduleReason(data)
	}
	if ReplayInFlight(h) {
		// A dead-letter replay waiting for its one-shot schedule to fire
		// (package dlq): a schedule jetflow wrote, gone once it fires.
		return ""
	}
	foreign := func(format string, args ...any) string {
		return "not a schedule jetflow wrote: " + fmt.Sprintf(format, args...)
	}
	switch got := h.Get(HeaderSchedule); {
	case got == "":
		return foreign("no %s header", HeaderSchedule)
	case got != name:
		return foreign("its %s header names %s", HeaderSchedule, Quote(got))
	}
	if _, err := cronexpr.Parse(spec); err != nil {
		return foreign("its expression %s does not parse: %s", Quote(spec), Quote(err.Error()))
	}
	if got := h.Get(HeaderScheduleSpec); got != spec {
		return foreign("%s %s differs from the server's %s", HeaderScheduleSpec, Quote(got), Quote(spec))
	}
	zone := h.Get(HeaderScheduleTimeZone)
	if got := h.Get(HeaderScheduleZone); got != zone {
		return foreign("%s %s differs from the server's %s", HeaderScheduleZone, Quote(got), Quote(zone))
	}
	stored := h.Get(HeaderScheduleHash)
	if stored == "" {
		return foreign("no %s header", HeaderScheduleHash)
	}
	custom := make(map[string]string)
	for k, vs := range h {
		if ReservedHeader(k) {
			continue
		}
		if len(vs) != 1 {
			return foreign("header %s has %d values", Quote(k), len(vs))
		}
		custom[k] = vs[0]
	}
	_, want := BuildSchedule(Schedule{Spec: spec, Zone: zone, Target: h.Get(jetstream.ScheduleTargetHeader),
		Encoding: h.Get(HeaderEncoding), Data: data, Headers: custom})
	if stored != want {
		return foreign("what it fires does not match its %s (changed by another tool)", HeaderScheduleHash)
	}
	if target := h.Get(jetstream.ScheduleTargetHeader); !taskTarget(target) {
		return foreign("its target %s is not a task subject", Quote(target))
	}
	return ""
}

// DelayedProblem returns why the message stored last on the subject of a
// delayed task (a one-shot schedule) is not a schedule, or "" when it has a
// Nats-Schedule header. A delayed task whose schedule was replaced never
// fires and cannot be restored: its payload and headers are in the
// schedule's message, but its producer no longer waits for it.
func DelayedProblem(h nats.Header, data []byte) string {
	if h.Get(jetstream.ScheduleHeader) == "" {
		return NotScheduleReason(data)
	}
	return ""
}

// Quote returns at most a few dozen bytes of s, a value read from the
// wire, quoted in ASCII, marked as cut when it was longer.
func Quote(s string) string {
	if len(s) <= quotedBytes {
		return strconv.QuoteToASCII(s)
	}
	return strconv.QuoteToASCII(textcut.Cut(s, quotedBytes)) + "..."
}
