package dlq

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Header names of a dead-letter record. A record is a message on
// "<prefix>.dlq.<type>" in the dead-letter stream ([streams.Names.DLQStream]);
// its body is the task's payload, unchanged. Besides the headers below it
// keeps the task's own headers except the "Nats-" ones: custom headers,
// [framework.HeaderEncoding], [framework.HeaderTaskID] (always set on a
// record), [framework.HeaderEnqueuedAt] and [framework.HeaderScheduledFor].
// Times are RFC 3339 with nanoseconds, in UTC. See docs/failures.md.
const (
	// HeaderType is the task type.
	HeaderType = deadletter.HeaderType
	// HeaderPriority is the task's priority: critical, high, normal or low.
	HeaderPriority = deadletter.HeaderPriority
	// HeaderReason says why the task died, a [Reason].
	HeaderReason = deadletter.HeaderReason
	// HeaderOriginalSubject is the work subject the task was consumed from.
	HeaderOriginalSubject = deadletter.HeaderOriginalSubject
	// HeaderOriginalSeq is the task's sequence in the task stream.
	HeaderOriginalSeq = deadletter.HeaderOriginalSeq
	// HeaderDeliveries is the number of deliveries (attempts) the task got.
	HeaderDeliveries = deadletter.HeaderDeliveries
	// HeaderLastError is the error of the last attempt that returned one,
	// on one line, at most [MaxErrorLen] bytes.
	HeaderLastError = deadletter.HeaderLastError
	// HeaderLastErrorAttempt is the attempt that returned
	// [HeaderLastError]. When it is below [HeaderDeliveries], the later
	// attempts ended without a result: the worker crashed, lost its
	// connection or stopped sending heartbeats.
	HeaderLastErrorAttempt = deadletter.HeaderLastErrorAttempt
	// HeaderFirstFailure is when the first recorded attempt failed.
	// Absent when no attempt returned an error.
	HeaderFirstFailure = deadletter.HeaderFirstFailure
	// HeaderLastFailure is when the attempt of [HeaderLastError] failed.
	// Absent when no attempt returned an error.
	HeaderLastFailure = deadletter.HeaderLastFailure
	// HeaderDeadAt is when the record was written.
	HeaderDeadAt = deadletter.HeaderDeadAt
	// HeaderDeadCount is how many times the task died, this time
	// included: 1, or more after replays ([Queue.Replay]).
	HeaderDeadCount = deadletter.HeaderDeadCount
	// HeaderRoutedBy names who wrote the record: "worker" (the worker
	// that ran the failing attempt), "router" (from a max-deliveries
	// advisory) or "reconciler" (found without an advisory).
	HeaderRoutedBy = deadletter.HeaderRoutedBy
	// HeaderPayloadOmitted, when present, says that the record carries
	// no payload because the payload and the record's headers together
	// exceeded the server's max payload; its value is the payload size in
	// bytes. Such a record cannot be replayed.
	HeaderPayloadOmitted = deadletter.HeaderPayloadOmitted
	// HeaderHeadersOmitted, when present, lists the task headers
	// (comma-separated, cut to [MaxErrorLen] bytes) left out of the record
	// because together with the record's own headers they exceeded the
	// server's limit on a message's headers (64 KiB). The task was accepted
	// with them; the record would not have been.
	HeaderHeadersOmitted = deadletter.HeaderHeadersOmitted
	// HeaderReplayedFromSeq is set on a replayed task: the sequence of the
	// dead-letter record it was replayed from. A record of a task that died
	// again keeps it, which chains the task's deaths.
	HeaderReplayedFromSeq = deadletter.HeaderReplayedFromSeq
	// HeaderReplayedAt is set on a replayed task: when it was replayed.
	HeaderReplayedAt = deadletter.HeaderReplayedAt
	// HeaderPreviousError is set on a replayed task: the last error of the
	// death it was replayed from.
	HeaderPreviousError = deadletter.HeaderPreviousError
)

// MaxErrorLen is the longest error text, in bytes, kept in a dead-letter
// record ([HeaderLastError]) and in the failure records of the errors
// bucket. Longer texts are cut at a character boundary and end with "…".
const MaxErrorLen = deadletter.MaxErrorLen

// Reason says why a task was dead-lettered.
type Reason string

// The reasons of dead-letter records.
const (
	// ReasonPermanent: the handler returned a [framework.Permanent] error.
	ReasonPermanent Reason = deadletter.ReasonPermanent
	// ReasonDecode: the payload could not be decoded ([framework.ErrDecode]).
	ReasonDecode Reason = deadletter.ReasonDecode
	// ReasonMaxDeliveries: every attempt failed, timed out or was
	// abandoned.
	ReasonMaxDeliveries Reason = deadletter.ReasonMaxDeliveries
	// ReasonInvalid: the message could not be a task
	// ([framework.ErrCorruptTask]): an invalid ID or due time, published
	// without the jetflow client. The record's task ID is then
	// "seq-<sequence>"; the last error names the offending header.
	ReasonInvalid Reason = deadletter.ReasonInvalid
	// ReasonStranded: no consumer read the task's subject, and an
	// operator moved it ([Queue.MoveStranded]).
	ReasonStranded Reason = deadletter.ReasonStranded
	// ReasonConflict: a delayed task whose ID already had a pending
	// schedule stored from another delayed task (another producer's, or
	// the same ID enqueued again after the duplicate window). The pending
	// schedule was kept, unchanged; the record is the newcomer.
	ReasonConflict Reason = deadletter.ReasonConflict
	// ReasonVersion: a task whose payload version no live worker accepted
	// within the grace of the worker that last handed it back
	// ([framework.AcceptVersions], [framework.Timings].VersionGrace). Replay
	// it once a worker that accepts it runs.
	ReasonVersion Reason = deadletter.ReasonVersion
)

// Record is one record of the dead-letter stream, decoded.
type Record struct {
	// Seq is the record's sequence in the dead-letter stream: the key of
	// [Queue.Get], [Queue.Replay] and pagination.
	Seq uint64
	// Subject is the record's subject, "<prefix>.dlq.<type>".
	Subject string
	// Time is when the record was stored.
	Time time.Time
	// TaskID, Type and Priority are the task's.
	TaskID   string
	Type     string
	Priority framework.Priority
	// Reason says why the task died.
	Reason Reason
	// Deliveries is the number of attempts the task got.
	Deliveries int
	// LastError is the error of attempt LastErrorAttempt, the last one that
	// returned an error; empty when none did.
	LastError        string
	LastErrorAttempt int
	// FirstFailure and LastFailure bound the failed attempts that returned
	// an error; zero when none did.
	FirstFailure time.Time
	LastFailure  time.Time
	// DeadAt is when the record was written.
	DeadAt time.Time
	// DeadCount is how many times the task died, this time included.
	DeadCount int
	// RoutedBy is "worker", "router" or "reconciler" ([HeaderRoutedBy]).
	RoutedBy string
	// OriginalSubject and OriginalSeq locate the task in the task stream
	// when it died.
	OriginalSubject string
	OriginalSeq     uint64
	// PayloadOmitted is true when the record has no payload because it
	// would not fit ([HeaderPayloadOmitted]).
	PayloadOmitted bool
	// Headers are all the record's headers.
	Headers nats.Header
	// Payload is the task's payload.
	Payload []byte
}

// recordFrom decodes a stored record. Unknown or malformed headers leave
// their field at the zero value.
func recordFrom(m jsapi.Stored) Record {
	h := m.Header
	d := Record{
		Seq:             m.Seq,
		Subject:         m.Subject,
		Time:            m.Time,
		TaskID:          h.Get(framework.HeaderTaskID),
		Type:            h.Get(HeaderType),
		Reason:          Reason(h.Get(HeaderReason)),
		LastError:       h.Get(HeaderLastError),
		RoutedBy:        h.Get(HeaderRoutedBy),
		OriginalSubject: h.Get(HeaderOriginalSubject),
		PayloadOmitted:  h.Get(HeaderPayloadOmitted) != "",
		Headers:         h,
		Payload:         m.Data,
	}
	if p, err := streams.ParsePriority(h.Get(HeaderPriority)); err == nil {
		d.Priority = p
	}
	d.Deliveries, _ = strconv.Atoi(h.Get(HeaderDeliveries))
	d.LastErrorAttempt, _ = strconv.Atoi(h.Get(HeaderLastErrorAttempt))
	d.DeadCount, _ = strconv.Atoi(h.Get(HeaderDeadCount))
	d.OriginalSeq, _ = strconv.ParseUint(h.Get(HeaderOriginalSeq), 10, 64)
	d.FirstFailure = taskmsg.ParseTime(h.Get(HeaderFirstFailure))
	d.LastFailure = taskmsg.ParseTime(h.Get(HeaderLastFailure))
	d.DeadAt = taskmsg.ParseTime(h.Get(HeaderDeadAt))
	return d
}
