package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
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
	HeaderDLQType = "Jetflow-Type"
	// HeaderDLQPriority is the task's priority: critical, high, normal or low.
	HeaderDLQPriority = "Jetflow-Priority"
	// HeaderDLQReason says why the task died, a [DeadLetterReason].
	HeaderDLQReason = "Jetflow-Reason"
	// HeaderDLQOriginalSubject is the work subject the task was consumed from.
	HeaderDLQOriginalSubject = "Jetflow-Original-Subject"
	// HeaderDLQOriginalSeq is the task's sequence in the task stream.
	HeaderDLQOriginalSeq = "Jetflow-Original-Seq"
	// HeaderDLQDeliveries is the number of deliveries (attempts) the task got.
	HeaderDLQDeliveries = "Jetflow-Deliveries"
	// HeaderDLQLastError is the error of the last attempt that returned one,
	// on one line, at most [MaxDLQErrorLen] bytes.
	HeaderDLQLastError = "Jetflow-Last-Error"
	// HeaderDLQLastErrorAttempt is the attempt that returned
	// [HeaderDLQLastError]. When it is below [HeaderDLQDeliveries], the later
	// attempts ended without a result: the worker crashed, lost its
	// connection or stopped sending heartbeats.
	HeaderDLQLastErrorAttempt = "Jetflow-Last-Error-Attempt"
	// HeaderDLQFirstFailure is when the first recorded attempt failed.
	// Absent when no attempt returned an error.
	HeaderDLQFirstFailure = "Jetflow-First-Failure"
	// HeaderDLQLastFailure is when the attempt of [HeaderDLQLastError] failed.
	// Absent when no attempt returned an error.
	HeaderDLQLastFailure = "Jetflow-Last-Failure"
	// HeaderDLQDeadAt is when the record was written.
	HeaderDLQDeadAt = "Jetflow-Dead-At"
	// HeaderDLQDeadCount is how many times the task died, this time
	// included: 1, or more after replays ([DeadLetters.Replay]).
	HeaderDLQDeadCount = "Jetflow-Dead-Count"
	// HeaderDLQRoutedBy names who wrote the record: "worker" (the worker
	// that ran the failing attempt), "router" (from a max-deliveries
	// advisory) or "reconciler" (found without an advisory).
	HeaderDLQRoutedBy = "Jetflow-Routed-By"
	// HeaderDLQPayloadOmitted, when present, says that the record carries
	// no payload because the payload and the record's headers together
	// exceeded the server's max payload; its value is the payload size in
	// bytes. Such a record cannot be replayed.
	HeaderDLQPayloadOmitted = "Jetflow-Payload-Omitted"
	// HeaderDLQReplayedFromSeq is set on a replayed task: the sequence of the
	// dead-letter record it was replayed from. A record of a task that died
	// again keeps it, which chains the task's deaths.
	HeaderDLQReplayedFromSeq = "Jetflow-Replayed-From-Seq"
	// HeaderDLQReplayedAt is set on a replayed task: when it was replayed.
	HeaderDLQReplayedAt = "Jetflow-Replayed-At"
	// HeaderDLQPreviousError is set on a replayed task: the last error of the
	// death it was replayed from.
	HeaderDLQPreviousError = "Jetflow-Previous-Error"
)

// MaxDLQErrorLen is the longest error text, in bytes, kept in a dead-letter
// record ([HeaderDLQLastError]) and in the failure records of the errors
// bucket. Longer texts are cut at a character boundary and end with "…".
const MaxDLQErrorLen = 1024

// DeadLetterReason says why a task was dead-lettered.
type DeadLetterReason string

// The reasons of dead-letter records.
const (
	// DeadLetterPermanent: the handler returned a [Permanent] error.
	DeadLetterPermanent DeadLetterReason = "permanent"
	// DeadLetterDecode: the payload could not be decoded ([ErrDecode]).
	DeadLetterDecode DeadLetterReason = "decode"
	// DeadLetterMaxDeliveries: every attempt failed, timed out or was
	// abandoned.
	DeadLetterMaxDeliveries DeadLetterReason = "max_deliveries"
)

// Who wrote a dead-letter record (header Jetflow-Routed-By).
const (
	routedByWorker     = "worker"
	routedByRouter     = "router"
	routedByReconciler = "reconciler"
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

// headerText makes s safe as a header value: control characters (line
// breaks included) become spaces, and it is cut to at most n bytes at a
// character boundary, ending with "…" when cut.
func headerText(s string, n int) string {
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
	cut := max(n-len(ellipsis), 0)
	for cut > 0 && !utf8.RuneStart(clean[cut]) {
		cut--
	}
	return clean[:cut] + ellipsis
}

// isRecordHeader reports whether k is a header a record sets itself; copies
// of them in the task's headers are replaced.
func isRecordHeader(k string) bool {
	switch k {
	case HeaderDLQType, HeaderDLQPriority, HeaderDLQReason, HeaderDLQOriginalSubject, HeaderDLQOriginalSeq,
		HeaderDLQDeliveries, HeaderDLQLastError, HeaderDLQLastErrorAttempt, HeaderDLQFirstFailure,
		HeaderDLQLastFailure, HeaderDLQDeadAt, HeaderDLQDeadCount, HeaderDLQRoutedBy, HeaderDLQPayloadOmitted:
		return true
	}
	return false
}

// Dead-letter defaults.
const (
	// DefaultReconcileInterval is how often a worker's reconciler looks for
	// max-delivered tasks that no advisory routed ([WithReconcileInterval]).
	DefaultReconcileInterval = time.Minute
	// DefaultErrorRetention is how long the errors bucket keeps the record
	// of a failed attempt ([WithErrorRetention]).
	DefaultErrorRetention = 72 * time.Hour
	// dlqRouters is the number of advisories a worker's router handles at
	// once.
	dlqRouters = 32
	// dlqOpTimeout bounds one routing step when the caller's context has no
	// deadline.
	dlqOpTimeout = 10 * time.Second
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

// dlqCore is what the worker side, the router, the reconciler and the
// operations API share: writing records and reading the errors bucket. It
// is safe for concurrent use.
type dlqCore struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	names streams.Names
	log   *slog.Logger

	// ackErrors, when set, counts advisory acknowledgements that could not
	// be sent (the worker's Stats.AckErrors).
	ackErrors *atomic.Uint64

	mu      sync.Mutex
	handles map[string]jetstream.Stream
}

func newDLQCore(nc *nats.Conn, js jetstream.JetStream, names streams.Names, log *slog.Logger) *dlqCore {
	return &dlqCore{nc: nc, js: js, names: names, log: log, handles: make(map[string]jetstream.Stream)}
}

// stream returns a cached handle on stream name.
func (c *dlqCore) stream(ctx context.Context, name string) (jetstream.Stream, error) {
	c.mu.Lock()
	s, ok := c.handles[name]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("framework: stream %s: %w: %w", name, ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("framework: stream %s: %w", name, err)
	}
	c.mu.Lock()
	c.handles[name] = s
	c.mu.Unlock()
	return s, nil
}

// The errors bucket: for the task at stream sequence S it holds the keys
// "S.first" (the first failed attempt that was recorded, written with an
// expected last subject sequence of 0 so that only the first write is
// stored), "S.last" (the latest failed attempt) and "S.dead" (written after
// the task's record reached the dead-letter stream). Workers write them with
// plain core publishes, without waiting for any acknowledgement: nothing is
// written for a task that succeeds, and a failure costs two small
// fire-and-forget messages.

// failureRecord is the JSON value of an errors-bucket key.
type failureRecord struct {
	TaskID  string `json:"task_id"`
	Type    string `json:"type,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Error   string `json:"error,omitempty"`
	DLQSeq  uint64 `json:"dlq_seq,omitempty"` // "dead" key only
}

// failureHistory is what the errors bucket knows about one task.
type failureHistory struct {
	first, last     *failureRecord
	firstAt, lastAt time.Time
	dead            bool   // a record reached the dead-letter stream
	deadSeq         uint64 // its sequence
}

func (c *dlqCore) errorsStream() string { return "KV_" + c.names.ErrorsBucket() }

func (c *dlqCore) errorKey(seq uint64, key string) string {
	return "$KV." + c.names.ErrorsBucket() + "." + strconv.FormatUint(seq, 10) + "." + key
}

// recordFailure notes a failed attempt of t in the errors bucket, without
// waiting for anything. It is best effort: a lost record only makes a later
// dead-letter record less informative.
func (c *dlqCore) recordFailure(t *Task, cause error) {
	if t.Sequence == 0 || cause == nil {
		return
	}
	data, err := json.Marshal(failureRecord{TaskID: t.ID, Type: t.Type, Attempt: t.Attempt,
		Error: headerText(cause.Error(), MaxDLQErrorLen)})
	if err != nil {
		return
	}
	first := &nats.Msg{Subject: c.errorKey(t.Sequence, "first"), Data: data,
		Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}}
	err = errors.Join(c.nc.PublishMsg(first), c.nc.Publish(c.errorKey(t.Sequence, "last"), data))
	if err != nil {
		c.log.Debug("jetflow could not record a failed attempt", slog.String(LogKeyTaskID, t.ID), slog.Any(LogKeyError, err))
	}
}

// markDead notes that the task at seq has its record at dlqSeq, so that a
// second router or reconciler does not write another one after the
// dead-letter stream's duplicate window. Best effort, like recordFailure.
func (c *dlqCore) markDead(seq uint64, taskID string, dlqSeq uint64) {
	data, err := json.Marshal(failureRecord{TaskID: taskID, DLQSeq: dlqSeq})
	if err != nil {
		return
	}
	if err := c.nc.Publish(c.errorKey(seq, "dead"), data); err != nil {
		c.log.Debug("jetflow could not mark a task dead-lettered", slog.String(LogKeyTaskID, taskID), slog.Any(LogKeyError, err))
	}
}

// history reads the errors-bucket keys of the task at seq in one request.
// Keys written for another task ID (a sequence reused after the task stream
// was recreated) are ignored. A missing bucket reads as no history.
func (c *dlqCore) history(ctx context.Context, seq uint64, taskID string) (failureHistory, error) {
	var h failureHistory
	prefix := c.errorKey(seq, "")
	_, err := jsapi.DirectGet(ctx, c.nc, c.errorsStream(), jsapi.GetRequest{MultiLastFor: []string{prefix + "*"}, Batch: 8},
		func(m jsapi.Stored) error {
			var rec failureRecord
			if json.Unmarshal(m.Data, &rec) != nil || rec.TaskID != taskID {
				return nil
			}
			switch strings.TrimPrefix(m.Subject, prefix) {
			case "first":
				h.first, h.firstAt = &rec, m.Time
			case "last":
				h.last, h.lastAt = &rec, m.Time
			case "dead":
				h.dead, h.deadSeq = true, rec.DLQSeq
			}
			return nil
		})
	if errors.Is(err, jsapi.ErrNoStream) {
		return h, nil
	}
	return h, err
}

// deadSource is what a record is built from.
type deadSource struct {
	seq        uint64 // in the task stream
	subject    string // work subject
	header     nats.Header
	payload    []byte
	taskID     string
	taskType   string
	priority   Priority
	deliveries int
	reason     DeadLetterReason
	routedBy   string
	hist       failureHistory
	// lastErr, when set, is the error of attempt lastErrAttempt that failed
	// at lastFailure (the worker knows it first hand); otherwise the
	// history's last record is used.
	lastErr        string
	lastErrAttempt int
	lastFailure    time.Time
	deadAt         time.Time
}

// dlqMsgID is the deduplication ID of the record of the task at seq.
func (c *dlqCore) dlqMsgID(seq uint64) string {
	return "dlq-" + c.names.TaskStream() + "-" + strconv.FormatUint(seq, 10)
}

// recordMsg builds the dead-letter record of s.
func (c *dlqCore) recordMsg(s deadSource) *nats.Msg {
	h := make(nats.Header, len(s.header)+16)
	for k, v := range s.header {
		if hasFoldPrefix(k, "nats-") || isRecordHeader(k) {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	deadCount := 1
	if n, err := strconv.Atoi(s.header.Get(HeaderDLQDeadCount)); err == nil && n > 0 {
		deadCount = n + 1
	}
	lastErr, lastAttempt, lastAt := s.lastErr, s.lastErrAttempt, s.lastFailure
	if lastErr == "" && s.hist.last != nil {
		lastErr, lastAttempt, lastAt = s.hist.last.Error, s.hist.last.Attempt, s.hist.lastAt
	}
	firstAt := s.hist.firstAt
	if s.hist.first == nil {
		firstAt = lastAt
	}
	if s.seq > 0 {
		h.Set(jetstream.MsgIDHeader, c.dlqMsgID(s.seq))
	}
	h.Set(HeaderTaskID, s.taskID)
	h.Set(HeaderDLQType, s.taskType)
	h.Set(HeaderDLQPriority, s.priority.String())
	h.Set(HeaderDLQReason, string(s.reason))
	h.Set(HeaderDLQOriginalSubject, s.subject)
	h.Set(HeaderDLQOriginalSeq, strconv.FormatUint(s.seq, 10))
	h.Set(HeaderDLQDeliveries, strconv.Itoa(s.deliveries))
	h.Set(HeaderDLQDeadAt, taskmsg.FormatTime(s.deadAt))
	h.Set(HeaderDLQDeadCount, strconv.Itoa(deadCount))
	h.Set(HeaderDLQRoutedBy, s.routedBy)
	if lastErr != "" {
		h.Set(HeaderDLQLastError, headerText(lastErr, MaxDLQErrorLen))
		h.Set(HeaderDLQLastErrorAttempt, strconv.Itoa(lastAttempt))
		h.Set(HeaderDLQLastFailure, taskmsg.FormatTime(lastAt))
		if !firstAt.IsZero() {
			h.Set(HeaderDLQFirstFailure, taskmsg.FormatTime(firstAt))
		}
	}
	msg := &nats.Msg{Subject: c.names.DLQSubject(s.taskType), Header: h, Data: s.payload}
	if limit := c.nc.MaxPayload(); limit > 0 && taskmsg.Size(msg) > limit {
		// Make room: first a short error, then no payload at all.
		if e := h.Get(HeaderDLQLastError); e != "" {
			h.Set(HeaderDLQLastError, headerText(e, 128))
		}
		if taskmsg.Size(msg) > limit {
			h.Set(HeaderDLQPayloadOmitted, strconv.Itoa(len(s.payload)))
			msg.Data = nil
		}
	}
	return msg
}

// publish stores a record in the dead-letter stream and waits for the
// stream's acknowledgement.
func (c *dlqCore) publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	ack, err := c.js.PublishMsg(ctx, msg)
	if err != nil {
		if natserr.NoResponse(err) {
			err = fmt.Errorf("%w: %w", ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("framework: publish dead letter %s: %w", msg.Header.Get(jetstream.MsgIDHeader), err)
	}
	if ack.Stream != c.names.DLQStream() {
		return nil, fmt.Errorf("framework: dead letter %s was stored in stream %s, not %s: check the streams' subjects",
			msg.Header.Get(jetstream.MsgIDHeader), ack.Stream, c.names.DLQStream())
	}
	return ack, nil
}

// deleteMsg removes seq from stream. A message that is already gone is not
// an error; gone reports whether this call removed it. (The request is made
// by hand: the jetstream package flattens the server's error into text.)
func (c *dlqCore) deleteMsg(ctx context.Context, stream string, seq uint64) (bool, error) {
	ctx, cancel := jsapi.WithTimeout(ctx)
	defer cancel()
	body, err := json.Marshal(struct {
		Seq     uint64 `json:"seq"`
		NoErase bool   `json:"no_erase"`
	}{seq, true})
	if err != nil {
		return false, err
	}
	resp, err := c.nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.DELETE."+stream, body)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			err = fmt.Errorf("%w: %w", ErrTopologyMissing, err)
		}
		return false, fmt.Errorf("framework: delete message %d of %s: %w", seq, stream, err)
	}
	var r struct {
		Success bool                `json:"success"`
		Error   *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return false, fmt.Errorf("framework: delete message %d of %s: %w", seq, stream, err)
	}
	if r.Success {
		return true, nil
	}
	if r.Error != nil && (r.Error.ErrorCode == jsErrCodeSequenceNotFound ||
		r.Error.ErrorCode == jsErrCodeMsgDeleteFailed && strings.Contains(r.Error.Description, "found")) {
		return false, nil
	}
	if r.Error == nil {
		return false, fmt.Errorf("framework: delete message %d of %s: unsuccessful", seq, stream)
	}
	if r.Error.ErrorCode == jetstream.JSErrCodeStreamNotFound {
		return false, fmt.Errorf("framework: delete message %d of %s: %w: %w", seq, stream, ErrTopologyMissing, r.Error)
	}
	return false, fmt.Errorf("framework: delete message %d of %s: %w", seq, stream, r.Error)
}

// Server error codes of a delete of a missing message.
const (
	jsErrCodeSequenceNotFound jetstream.ErrorCode = 10043
	jsErrCodeMsgDeleteFailed  jetstream.ErrorCode = 10057
)

// routeStored writes the record of a max-delivered task read from the task
// stream, then deletes the task. Every step is idempotent: the record's
// deduplication ID and the errors bucket's "dead" key keep a second router
// from writing a second record, and a task already deleted is not an error.
func (c *dlqCore) routeStored(ctx context.Context, m jsapi.Stored, deliveries int, routedBy string) error {
	prio, taskType, err := c.names.ParseTaskSubject(m.Subject)
	if err != nil {
		return err
	}
	// The ID the worker saw: for a task fired by a repeating schedule, the
	// tick's, so that its last error is found and a replay keeps it.
	taskID := taskmsg.ID(m.Header, m.Seq, m.Time)
	hist, err := c.history(ctx, m.Seq, taskID)
	if err != nil {
		return fmt.Errorf("framework: read failures of task %s: %w", taskID, err)
	}
	if !hist.dead {
		ack, err := c.publish(ctx, c.recordMsg(deadSource{
			seq: m.Seq, subject: m.Subject, header: m.Header, payload: m.Data,
			taskID: taskID, taskType: taskType, priority: prio, deliveries: deliveries,
			reason: DeadLetterMaxDeliveries, routedBy: routedBy, hist: hist, deadAt: time.Now(),
		}))
		if err != nil {
			return err
		}
		c.markDead(m.Seq, taskID, ack.Sequence)
		if !ack.Duplicate {
			c.log.Warn("jetflow task reached its max deliveries; dead-lettered",
				slog.String(LogKeyTaskID, taskID), slog.String(LogKeyTaskType, taskType),
				slog.Uint64("dlq_seq", ack.Sequence), slog.String("routed_by", routedBy))
		}
	}
	if _, err := c.deleteMsg(ctx, c.names.TaskStream(), m.Seq); err != nil {
		return err
	}
	return nil
}

// dlqExt is a worker's dead-letter extension.
type dlqExt struct {
	w    *Worker
	core *dlqCore
	opts deadLetterOptions
}

// installDeadLetters installs the dead-letter extension unless
// WithDeadLetters(false).
func (w *Worker) installDeadLetters() {
	o := w.opts.deadLetters
	if o.disabled {
		return
	}
	x := &dlqExt{w: w, core: newDLQCore(w.nc, w.js, w.names, w.log), opts: o}
	x.core.ackErrors = &w.stats.ackErrors
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
	if _, err := x.core.stream(ctx, w.names.DLQStream()); err != nil {
		return err
	}
	if _, err := x.core.stream(ctx, w.names.TaskStream()); err != nil {
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
		x.core.recordFailure(t, o.Err)
	}
}

// deadLetter writes the record of a task the worker is about to terminate.
func (x *dlqExt) deadLetter(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error {
	reason := DeadLetterMaxDeliveries
	switch {
	case errors.Is(cause, ErrDecode):
		reason = DeadLetterDecode
	case IsPermanent(cause):
		reason = DeadLetterPermanent
	}
	var hist failureHistory
	if t.Attempt > 1 && t.Sequence > 0 {
		h, err := x.core.history(ctx, t.Sequence, t.ID)
		if err != nil {
			t.Logger().Warn("jetflow could not read the task's earlier failures", slog.Any(LogKeyError, err))
		}
		hist = h
	}
	if hist.dead {
		// Dead-lettered by an earlier delivery whose termination was lost.
		return nil
	}
	now := time.Now()
	ack, err := x.core.publish(ctx, x.core.recordMsg(deadSource{
		seq: t.Sequence, subject: msg.Subject(), header: t.Headers, payload: t.Payload,
		taskID: t.ID, taskType: t.Type, priority: t.Priority, deliveries: t.Attempt,
		reason: reason, routedBy: routedByWorker, hist: hist,
		lastErr: cause.Error(), lastErrAttempt: t.Attempt, lastFailure: now, deadAt: now,
	}))
	if err != nil {
		// Whoever dead-letters the task later still learns its error.
		x.core.recordFailure(t, cause)
		return err
	}
	if t.Sequence > 0 {
		x.core.markDead(t.Sequence, t.ID, ack.Sequence)
	}
	return nil
}
