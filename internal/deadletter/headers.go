package deadletter

import (
	"strings"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/textcut"
)

// Header names of a dead-letter record. A record is a message on
// "<prefix>.dlq.<type>" in the dead-letter stream ([streams.Names.DLQStream]);
// its body is the task's payload, unchanged. Besides the headers below it
// keeps the task's own headers except the "Nats-" ones: custom headers,
// [HeaderEncoding], [taskmsg.HeaderTaskID] (always set on a record),
// [HeaderEnqueuedAt] and [HeaderScheduledFor]. Times are RFC 3339 with
// nanoseconds, in UTC. See docs/failures.md.
const (
	// HeaderType is the task type.
	HeaderType = "Jetflow-Type"
	// HeaderPriority is the task's priority: critical, high, normal or low.
	HeaderPriority = "Jetflow-Priority"
	// HeaderReason says why the task died: one of the Reason constants.
	HeaderReason = "Jetflow-Reason"
	// HeaderOriginalSubject is the work subject the task was consumed from.
	HeaderOriginalSubject = "Jetflow-Original-Subject"
	// HeaderOriginalSeq is the task's sequence in the task stream.
	HeaderOriginalSeq = "Jetflow-Original-Seq"
	// HeaderDeliveries is the number of deliveries (attempts) the task got.
	HeaderDeliveries = "Jetflow-Deliveries"
	// HeaderLastError is the error of the last attempt that returned one,
	// on one line, at most [MaxErrorLen] bytes.
	HeaderLastError = "Jetflow-Last-Error"
	// HeaderLastErrorAttempt is the attempt that returned
	// [HeaderLastError]. When it is below [HeaderDeliveries], the later
	// attempts ended without a result: the worker crashed, lost its
	// connection or stopped sending heartbeats.
	HeaderLastErrorAttempt = "Jetflow-Last-Error-Attempt"
	// HeaderFirstFailure is when the first recorded attempt failed.
	// Absent when no attempt returned an error.
	HeaderFirstFailure = "Jetflow-First-Failure"
	// HeaderLastFailure is when the attempt of [HeaderLastError] failed.
	// Absent when no attempt returned an error.
	HeaderLastFailure = "Jetflow-Last-Failure"
	// HeaderDeadAt is when the record was written.
	HeaderDeadAt = "Jetflow-Dead-At"
	// HeaderDeadCount is how many times the task died, this time
	// included: 1, or more after replays (package dlq's Queue.Replay).
	HeaderDeadCount = "Jetflow-Dead-Count"
	// HeaderRoutedBy names who wrote the record: "worker" (the worker
	// that ran the failing attempt), "router" (from a max-deliveries
	// advisory) or "reconciler" (found without an advisory).
	HeaderRoutedBy = "Jetflow-Routed-By"
	// HeaderPayloadOmitted, when present, says that the record carries
	// no payload because the payload and the record's headers together
	// exceeded the server's max payload; its value is the payload size in
	// bytes. Such a record cannot be replayed.
	HeaderPayloadOmitted = "Jetflow-Payload-Omitted"
	// HeaderHeadersOmitted, when present, lists the task headers
	// (comma-separated, cut to [MaxErrorLen] bytes) left out of the record
	// because together with the record's own headers they exceeded the
	// server's limit on a message's headers.
	HeaderHeadersOmitted = "Jetflow-Headers-Omitted"
	// HeaderReplayedFromSeq is set on a replayed task: the sequence of the
	// dead-letter record it was replayed from. A record of a task that died
	// again keeps it, which chains the task's deaths.
	HeaderReplayedFromSeq = taskmsg.HeaderReplayedFromSeq
	// HeaderReplayedAt is set on a replayed task: when it was replayed.
	HeaderReplayedAt = "Jetflow-Replayed-At"
	// HeaderPreviousError is set on a replayed task: the last error of the
	// death it was replayed from.
	HeaderPreviousError = "Jetflow-Previous-Error"
)

// Reasons of dead-letter records (header Jetflow-Reason); package
// package dlq exports them as Reason values.
const (
	ReasonPermanent     = "permanent"
	ReasonDecode        = "decode"
	ReasonMaxDeliveries = "max_deliveries"
	ReasonInvalid       = "invalid"
	ReasonStranded      = "stranded"
	// ReasonConflict: a delayed task whose ID already had a pending
	// schedule stored from another delayed task; the existing schedule
	// was kept.
	ReasonConflict = "conflict"
	// ReasonVersion: a task whose payload version no live worker
	// accepted within the worker's grace period.
	ReasonVersion = "version"
)

// MaxErrorLen is the longest error text, in bytes, kept in a record and in
// the failure records of the errors bucket.
const MaxErrorLen = 1024

// Log attribute keys, the same as package framework's.
const (
	logKeyTaskID   = "task_id"
	logKeyTaskType = "task_type"
	logKeyError    = "error"
)

func hasNatsPrefix(k string) bool { return len(k) >= 5 && strings.EqualFold(k[:5], "nats-") }

// Who wrote a dead-letter record (header Jetflow-Routed-By).
const (
	routedByWorker     = "worker"
	routedByRouter     = "router"
	routedByReconciler = "reconciler"
	routedByOperator   = "operator"
)

// headerText makes s safe as a header value: control characters (line
// breaks included) become spaces, and it is cut to at most n bytes at a
// character boundary, ending with "…" when cut.
func Text(s string, n int) string {
	clean := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
	if len(clean) <= n {
		return clean
	}
	const ellipsis = "…"
	return textcut.Cut(clean, n-len(ellipsis)) + ellipsis
}

// isRecordHeader reports whether k is a header a record sets itself; copies
// of them in the task's headers are replaced.
func IsRecordHeader(k string) bool {
	switch k {
	case HeaderType, HeaderPriority, HeaderReason, HeaderOriginalSubject, HeaderOriginalSeq,
		HeaderDeliveries, HeaderLastError, HeaderLastErrorAttempt, HeaderFirstFailure,
		HeaderLastFailure, HeaderDeadAt, HeaderDeadCount, HeaderRoutedBy, HeaderPayloadOmitted,
		HeaderHeadersOmitted:
		return true
	}
	return false
}
