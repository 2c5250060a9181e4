package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// Header names of a dead-letter record. A record is a message on
// "<prefix>.dlq.<type>" in the dead-letter stream ([streams.Names.DLQStream]);
// its body is the task's payload, unchanged. Besides the headers below it
// keeps the task's own headers except the "Nats-" ones: custom headers,
// [HeaderEncoding], [HeaderTaskID] (always set on a record),
// [HeaderEnqueuedAt] and [HeaderScheduledFor]. Times are RFC 3339 with
// nanoseconds, in UTC. See docs/failures.md.
const (
	// HeaderDLQType is the task type.
	HeaderDLQType = deadletter.HeaderType
	// HeaderDLQPriority is the task's priority: critical, high, normal or low.
	HeaderDLQPriority = deadletter.HeaderPriority
	// HeaderDLQReason says why the task died, a [DeadLetterReason].
	HeaderDLQReason = deadletter.HeaderReason
	// HeaderDLQOriginalSubject is the work subject the task was consumed from.
	HeaderDLQOriginalSubject = deadletter.HeaderOriginalSubject
	// HeaderDLQOriginalSeq is the task's sequence in the task stream.
	HeaderDLQOriginalSeq = deadletter.HeaderOriginalSeq
	// HeaderDLQDeliveries is the number of deliveries (attempts) the task got.
	HeaderDLQDeliveries = deadletter.HeaderDeliveries
	// HeaderDLQLastError is the error of the last attempt that returned one,
	// on one line, at most [MaxDLQErrorLen] bytes.
	HeaderDLQLastError = deadletter.HeaderLastError
	// HeaderDLQLastErrorAttempt is the attempt that returned
	// [HeaderDLQLastError]. When it is below [HeaderDLQDeliveries], the later
	// attempts ended without a result: the worker crashed, lost its
	// connection or stopped sending heartbeats.
	HeaderDLQLastErrorAttempt = deadletter.HeaderLastErrorAttempt
	// HeaderDLQFirstFailure is when the first recorded attempt failed.
	// Absent when no attempt returned an error.
	HeaderDLQFirstFailure = deadletter.HeaderFirstFailure
	// HeaderDLQLastFailure is when the attempt of [HeaderDLQLastError] failed.
	// Absent when no attempt returned an error.
	HeaderDLQLastFailure = deadletter.HeaderLastFailure
	// HeaderDLQDeadAt is when the record was written.
	HeaderDLQDeadAt = deadletter.HeaderDeadAt
	// HeaderDLQDeadCount is how many times the task died, this time
	// included: 1, or more after replays ([DeadLetters.Replay]).
	HeaderDLQDeadCount = deadletter.HeaderDeadCount
	// HeaderDLQRoutedBy names who wrote the record: "worker" (the worker
	// that ran the failing attempt), "router" (from a max-deliveries
	// advisory) or "reconciler" (found without an advisory).
	HeaderDLQRoutedBy = deadletter.HeaderRoutedBy
	// HeaderDLQPayloadOmitted, when present, says that the record carries
	// no payload because the payload and the record's headers together
	// exceeded the server's max payload; its value is the payload size in
	// bytes. Such a record cannot be replayed.
	HeaderDLQPayloadOmitted = deadletter.HeaderPayloadOmitted
	// HeaderDLQHeadersOmitted, when present, lists the task headers
	// (comma-separated, cut to [MaxDLQErrorLen] bytes) left out of the record
	// because together with the record's own headers they exceeded the
	// server's limit on a message's headers (64 KiB). The task was accepted
	// with them; the record would not have been.
	HeaderDLQHeadersOmitted = deadletter.HeaderHeadersOmitted
	// HeaderDLQReplayedFromSeq is set on a replayed task: the sequence of the
	// dead-letter record it was replayed from. A record of a task that died
	// again keeps it, which chains the task's deaths.
	HeaderDLQReplayedFromSeq = deadletter.HeaderReplayedFromSeq
	// HeaderDLQReplayedAt is set on a replayed task: when it was replayed.
	HeaderDLQReplayedAt = deadletter.HeaderReplayedAt
	// HeaderDLQPreviousError is set on a replayed task: the last error of the
	// death it was replayed from.
	HeaderDLQPreviousError = deadletter.HeaderPreviousError
)

// MaxDLQErrorLen is the longest error text, in bytes, kept in a dead-letter
// record ([HeaderDLQLastError]) and in the failure records of the errors
// bucket. Longer texts are cut at a character boundary and end with "…".
const MaxDLQErrorLen = deadletter.MaxErrorLen

// DeadLetterReason says why a task was dead-lettered.
type DeadLetterReason string

// The reasons of dead-letter records.
const (
	// DeadLetterPermanent: the handler returned a [Permanent] error.
	DeadLetterPermanent DeadLetterReason = deadletter.ReasonPermanent
	// DeadLetterDecode: the payload could not be decoded ([ErrDecode]).
	DeadLetterDecode DeadLetterReason = deadletter.ReasonDecode
	// DeadLetterMaxDeliveries: every attempt failed, timed out or was
	// abandoned.
	DeadLetterMaxDeliveries DeadLetterReason = deadletter.ReasonMaxDeliveries
	// DeadLetterInvalid: the message could not be a task ([ErrCorruptTask]):
	// an invalid ID or due time, published without the jetflow client. The
	// record's task ID is then "seq-<sequence>"; the last error names the
	// offending header.
	DeadLetterInvalid DeadLetterReason = deadletter.ReasonInvalid
	// DeadLetterStranded: no consumer read the task's subject, and an
	// operator moved it ([Inspector.DeadLetterStranded]).
	DeadLetterStranded DeadLetterReason = deadletter.ReasonStranded
)

// DeadLetter is one record of the dead-letter stream, decoded.
type DeadLetter struct {
	// Seq is the record's sequence in the dead-letter stream: the key of
	// [DeadLetters.Get], [DeadLetters.Replay] and pagination.
	Seq uint64
	// Subject is the record's subject, "<prefix>.dlq.<type>".
	Subject string
	// Time is when the record was stored.
	Time time.Time
	// TaskID, Type and Priority are the task's.
	TaskID   string
	Type     string
	Priority Priority
	// Reason says why the task died.
	Reason DeadLetterReason
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
	// RoutedBy is "worker", "router" or "reconciler" ([HeaderDLQRoutedBy]).
	RoutedBy string
	// OriginalSubject and OriginalSeq locate the task in the task stream
	// when it died.
	OriginalSubject string
	OriginalSeq     uint64
	// PayloadOmitted is true when the record has no payload because it
	// would not fit ([HeaderDLQPayloadOmitted]).
	PayloadOmitted bool
	// Headers are all the record's headers.
	Headers nats.Header
	// Payload is the task's payload.
	Payload []byte
}

// deadLetterFrom decodes a stored record. Unknown or malformed headers leave
// their field at the zero value.
func deadLetterFrom(m jsapi.Stored) DeadLetter {
	h := m.Header
	d := DeadLetter{
		Seq:             m.Seq,
		Subject:         m.Subject,
		Time:            m.Time,
		TaskID:          h.Get(HeaderTaskID),
		Type:            h.Get(HeaderDLQType),
		Reason:          DeadLetterReason(h.Get(HeaderDLQReason)),
		LastError:       h.Get(HeaderDLQLastError),
		RoutedBy:        h.Get(HeaderDLQRoutedBy),
		OriginalSubject: h.Get(HeaderDLQOriginalSubject),
		PayloadOmitted:  h.Get(HeaderDLQPayloadOmitted) != "",
		Headers:         h,
		Payload:         m.Data,
	}
	if p, err := streams.ParsePriority(h.Get(HeaderDLQPriority)); err == nil {
		d.Priority = p
	}
	d.Deliveries, _ = strconv.Atoi(h.Get(HeaderDLQDeliveries))
	d.LastErrorAttempt, _ = strconv.Atoi(h.Get(HeaderDLQLastErrorAttempt))
	d.DeadCount, _ = strconv.Atoi(h.Get(HeaderDLQDeadCount))
	d.OriginalSeq, _ = strconv.ParseUint(h.Get(HeaderDLQOriginalSeq), 10, 64)
	d.FirstFailure = taskmsg.ParseTime(h.Get(HeaderDLQFirstFailure))
	d.LastFailure = taskmsg.ParseTime(h.Get(HeaderDLQLastFailure))
	d.DeadAt = taskmsg.ParseTime(h.Get(HeaderDLQDeadAt))
	return d
}

// Dead-letter defaults.
const (
	// DefaultReconcileInterval is how often a worker's reconciler looks for
	// max-delivered tasks that no advisory routed ([WithReconcileInterval]).
	DefaultReconcileInterval = time.Minute
	// DefaultErrorRetention is how long the errors bucket keeps the record
	// of a failed attempt ([WithErrorRetention]).
	DefaultErrorRetention = streams.DefaultErrorRetention
)

type deadLetterOptions struct {
	disabled       bool
	routerDisabled bool
	reconcileEvery time.Duration // 0: DefaultReconcileInterval
	errorTTL       time.Duration // 0: DefaultErrorRetention
}

// WithDeadLetters turns the worker's dead-letter handling on or off. Workers
// only. Default on: a task that fails permanently, cannot be decoded, or
// fails its last attempt is written to the dead-letter stream before it is
// removed from the task stream; every failed attempt is recorded in the
// errors bucket ([streams.Names.ErrorsBucket]) so that records written
// later by the router still carry the last error; and the worker runs the
// dead-letter router ([WithDeadLetterRouter]).
//
// Off, a permanent failure is removed without a record, a failed last attempt
// is handed back to the server, which emits a max-deliveries advisory that
// the router of another worker (or [DeadLetters.Reconcile]) routes, without
// the error.
func WithDeadLetters(enabled bool) WorkerOption {
	return workerOnly(func(o *options) error { o.deadLetters.disabled = !enabled; return nil })
}

// WithDeadLetterRouter turns the worker's dead-letter router and reconciler
// on or off. Workers only. Default on (when [WithDeadLetters] is on). The
// router moves tasks that reached their max deliveries without their
// worker's help (the worker crashed, lost its connection, or has dead
// letters off) to the dead-letter stream, from the advisories captured in
// the advisory stream; the reconciler finds those whose advisory was lost.
// Both are safe to run in every worker process at once.
func WithDeadLetterRouter(enabled bool) WorkerOption {
	return workerOnly(func(o *options) error { o.deadLetters.routerDisabled = !enabled; return nil })
}

// WithReconcileInterval sets how often the worker's reconciler looks for
// max-delivered tasks that no advisory routed. A task it finds is routed on
// the following look, one interval later, once the look confirmed it.
// Workers only. Default [DefaultReconcileInterval]; at least 100 ms.
func WithReconcileInterval(d time.Duration) WorkerOption {
	return workerOnly(func(o *options) error {
		if d < 100*time.Millisecond {
			return fmt.Errorf("%w: reconcile interval %v, want ≥ 100ms", ErrInvalidOption, d)
		}
		o.deadLetters.reconcileEvery = d
		return nil
	})
}

// WithErrorRetention sets how long the errors bucket keeps the record of a
// failed attempt; it should exceed the longest time a task spends retrying.
// It applies when a worker creates the bucket; an existing bucket keeps its
// setting. Workers only. Default [DefaultErrorRetention]; at least 1 minute.
func WithErrorRetention(d time.Duration) WorkerOption {
	return workerOnly(func(o *options) error {
		if d < time.Minute {
			return fmt.Errorf("%w: error retention %v, want ≥ 1m", ErrInvalidOption, d)
		}
		o.deadLetters.errorTTL = d
		return nil
	})
}

// dlqExt is a worker's dead-letter extension.
type dlqExt struct {
	w    *Worker
	core *deadletter.Core
	opts deadLetterOptions
}

// installDeadLetters installs the dead-letter extension unless
// WithDeadLetters(false).
func (w *Worker) installDeadLetters() {
	o := w.opts.deadLetters
	if o.disabled {
		return
	}
	x := &dlqExt{w: w, core: newDeadLetterCore(w.nc, w.js, w.names, w.log), opts: o}
	x.core.AckErrors = &w.stats.ackErrors
	e := extension{
		name:       "dead-letters",
		finished:   x.finished,
		prepare:    x.prepare,
		deadLetter: x.deadLetter,
	}
	if !o.routerDisabled {
		e.service = x.service
	}
	w.addExtension(e)
}

// prepare checks that the dead-letter stream exists and creates the errors
// bucket, like the task stream: same storage and replicas.
func (x *dlqExt) prepare(ctx context.Context, w *Worker) error {
	if _, err := x.core.Stream(ctx, w.names.DLQStream()); err != nil {
		return err
	}
	if _, err := x.core.Stream(ctx, w.names.TaskStream()); err != nil {
		return err
	}
	ttl := x.opts.errorTTL
	if ttl == 0 {
		ttl = DefaultErrorRetention
	}
	err := jsapi.EnsureBucket(ctx, w.js, jsapi.TaskStreamBucket(ctx, w.js, w.names.TaskStream(), jetstream.KeyValueConfig{
		Bucket:      w.names.ErrorsBucket(),
		Description: "jetflow: failed attempts of tasks, read when a task is dead-lettered",
		History:     1,
		TTL:         ttl,
	}), false)
	if err != nil {
		// Records still work without it, only with less detail.
		w.log.Warn("jetflow could not create the errors bucket; dead-letter records written by the router will lack the last error",
			slog.String("bucket", w.names.ErrorsBucket()), slog.Any(LogKeyError, err))
	}
	return nil
}

// finished records a failed attempt that will be retried.
func (x *dlqExt) finished(_ context.Context, t *Task, o Outcome) {
	if o.Action == ActionRetry {
		x.core.RecordFailure(attemptOf(t, "", o.Err))
	}
}

// deadLetter writes the record of a task the worker is about to terminate.
func (x *dlqExt) deadLetter(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error {
	reason := DeadLetterMaxDeliveries
	switch {
	case errors.Is(cause, ErrCorruptTask):
		reason = DeadLetterInvalid
	case errors.Is(cause, ErrDecode):
		reason = DeadLetterDecode
	case IsPermanent(cause):
		reason = DeadLetterPermanent
	}
	return x.core.WriteFromWorker(ctx, attemptOf(t, msg.Subject(), cause), string(reason), t.Logger())
}

// attemptOf describes the failed attempt of t for the dead-letter core.
func attemptOf(t *Task, subject string, cause error) deadletter.Attempt {
	return deadletter.Attempt{Seq: t.Sequence, Subject: subject, Header: t.Headers, Payload: t.Payload,
		ID: t.ID, Type: t.Type, Priority: t.Priority.String(), Attempt: t.Attempt, Cause: cause}
}

// newDeadLetterCore returns the dead-letter core of names' topology.
func newDeadLetterCore(nc *nats.Conn, js jetstream.JetStream, names streams.Names, log *slog.Logger) *deadletter.Core {
	return deadletter.NewCore(nc, js, deadletter.Topology{
		TaskStream: names.TaskStream(), DLQStream: names.DLQStream(), AdvisoryStream: names.AdvisoryStream(),
		ErrorsBucket: names.ErrorsBucket(), TaskWildcard: names.TaskWildcard(), DLQSubject: names.DLQSubject,
		Work: func(subject string) (string, string, string, bool) {
			p, typ, err := names.ParseTaskSubject(subject)
			if err != nil {
				return "", "", "", false
			}
			return typ, p.String(), names.ConsumerName(typ, p), true
		},
	}, log)
}

// service runs the router and the reconciler until ctx ends.
func (x *dlqExt) service(ctx context.Context, _ *Worker) {
	every := x.opts.reconcileEvery
	if every == 0 {
		every = DefaultReconcileInterval
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		x.core.RunRouter(ctx)
	}()
	go func() {
		defer wg.Done()
		x.core.RunReconciler(ctx, every)
	}()
	wg.Wait()
}
