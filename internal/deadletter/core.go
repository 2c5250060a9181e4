package deadletter

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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// Core is what the worker side, the router, the reconciler and the
// operations API share: writing records and reading the errors bucket. It
// is safe for concurrent use.
type Core struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	topo Topology
	log  *slog.Logger

	// AckErrors, when set, counts advisory acknowledgements that could not
	// be sent (the worker's Stats.AckErrors). Set it before running the
	// router.
	AckErrors *atomic.Uint64
	// Routed, when set, is told of each task the router or the reconciler
	// dead-lettered (not of those a worker wrote itself): the worker
	// writes its final state record. Set it before running the router.
	Routed func(RoutedTask)
	// Partitions, when set, returns the core of another task stream (a
	// task partition) by name, nil for a stream jetflow does not know:
	// one router consumes the advisories of every partition and routes
	// each on its task's own stream. Set it before running the router.
	Partitions func(stream string) *Core

	mu        sync.Mutex
	handles   map[string]jetstream.Stream
	consumers map[string]consumerState // the router's memo (recentConsumer)
}

// NewCore returns a core writing and reading the records of topo on nc.
func NewCore(nc *nats.Conn, js jetstream.JetStream, topo Topology, log *slog.Logger) *Core {
	return &Core{nc: nc, js: js, topo: topo, log: log, handles: make(map[string]jetstream.Stream),
		consumers: make(map[string]consumerState)}
}

// Topology returns the core's topology.
func (c *Core) Topology() Topology { return c.topo }

// Stream returns a cached handle on stream name.
func (c *Core) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	c.mu.Lock()
	s, ok := c.handles[name]
	c.mu.Unlock()
	if ok {
		return s, nil
	}
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("framework: stream %s: %w: %w", name, natserr.ErrTopologyMissing, err)
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

func (c *Core) errorsStream() string { return "KV_" + c.topo.ErrorsBucket }

func (c *Core) errorKey(seq uint64, key string) string {
	return "$KV." + c.topo.ErrorsBucket + "." + c.topo.ErrorKeys + strconv.FormatUint(seq, 10) + "." + key
}

// Attempt is a failed attempt of a task, as its worker knows it.
type Attempt struct {
	Seq      uint64 // in the task stream; 0 for a task not read from it
	Subject  string // work subject
	Header   nats.Header
	Payload  []byte
	ID, Type string
	Priority string
	Attempt  int
	Cause    error
}

// RecordFailure notes failed attempt a in the errors bucket, without
// waiting for anything. It is best effort: a lost record only makes a later
// dead-letter record less informative.
func (c *Core) RecordFailure(a Attempt) {
	if a.Seq == 0 || a.Cause == nil {
		return
	}
	data, err := json.Marshal(failureRecord{TaskID: a.ID, Type: a.Type, Attempt: a.Attempt,
		Error: Text(a.Cause.Error(), MaxErrorLen)})
	if err != nil {
		return
	}
	first := &nats.Msg{Subject: c.errorKey(a.Seq, "first"), Data: data,
		Header: nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}}
	err = errors.Join(c.nc.PublishMsg(first), c.nc.Publish(c.errorKey(a.Seq, "last"), data))
	if err != nil {
		c.log.Debug("jetflow could not record a failed attempt", slog.String(logKeyTaskID, a.ID), slog.Any(logKeyError, err))
	}
}

// WriteFromWorker writes the record of a task its worker is about to
// terminate after attempt a failed for reason, unless an earlier delivery
// wrote it already (its termination was lost). On error the task must not
// be terminated; the failure is recorded for whoever dead-letters it later.
func (c *Core) WriteFromWorker(ctx context.Context, a Attempt, reason string, log *slog.Logger) error {
	var hist failureHistory
	if a.Attempt > 1 && a.Seq > 0 {
		h, err := c.history(ctx, a.Seq, a.ID)
		if err != nil {
			log.Warn("jetflow could not read the task's earlier failures", slog.Any(logKeyError, err))
		}
		hist = h
	}
	if hist.dead {
		return nil // dead-lettered by an earlier delivery whose termination was lost
	}
	now := time.Now()
	ack, err := c.publish(ctx, c.recordMsg(deadSource{
		seq: a.Seq, subject: a.Subject, header: a.Header, payload: a.Payload,
		taskID: a.ID, taskType: a.Type, priority: a.Priority, deliveries: a.Attempt,
		reason: reason, routedBy: routedByWorker, hist: hist,
		lastErr: a.Cause.Error(), lastErrAttempt: a.Attempt, lastFailure: now, deadAt: now,
	}))
	if err != nil {
		c.RecordFailure(a)
		return err
	}
	if a.Seq > 0 {
		c.markDead(a.Seq, a.ID, ack.Sequence)
	}
	return nil
}

// markDead notes that the task at seq has its record at dlqSeq, so that a
// second router or reconciler does not write another one after the
// dead-letter stream's duplicate window. Best effort, like recordFailure.
func (c *Core) markDead(seq uint64, taskID string, dlqSeq uint64) {
	data, err := json.Marshal(failureRecord{TaskID: taskID, DLQSeq: dlqSeq})
	if err != nil {
		return
	}
	if err := c.nc.Publish(c.errorKey(seq, "dead"), data); err != nil {
		c.log.Debug("jetflow could not mark a task dead-lettered", slog.String(logKeyTaskID, taskID), slog.Any(logKeyError, err))
	}
}

// history reads the errors-bucket keys of the task at seq in one request.
// Keys written for another task ID (a sequence reused after the task stream
// was recreated) are ignored. A missing bucket reads as no history.
func (c *Core) history(ctx context.Context, seq uint64, taskID string) (failureHistory, error) {
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
	if err != nil || !h.dead {
		return h, err
	}
	// Whoever may publish on the bucket's subjects can write a "dead" key,
	// and a task taken for dead-lettered is deleted without a record. The
	// key counts only when the record it names is the task's. Unconfirmed
	// (the record is not the task's, or could not be read), the caller
	// writes the record again: its deduplication ID drops it within the
	// duplicate window, and a second record beats a lost task.
	ok, err := c.recordOf(ctx, h.deadSeq, seq, taskID)
	if err != nil || !ok {
		attrs := []any{slog.String(logKeyTaskID, taskID), slog.Uint64("dlq_seq", h.deadSeq)}
		if err != nil {
			attrs = append(attrs, slog.Any(logKeyError, err))
		}
		c.log.Warn("jetflow ignores a dead-letter mark it cannot match with the task's record", attrs...)
		h.dead, h.deadSeq = false, 0
	}
	return h, nil
}

// recordOf reports whether the record at dlqSeq of the dead-letter stream
// is the one of the task with taskID at seq of the task stream.
func (c *Core) recordOf(ctx context.Context, dlqSeq, seq uint64, taskID string) (bool, error) {
	if dlqSeq == 0 {
		return false, nil
	}
	found := false
	_, err := jsapi.DirectGet(ctx, c.nc, c.topo.DLQStream, jsapi.GetRequest{Seq: dlqSeq}, func(m jsapi.Stored) error {
		found = m.Header.Get(taskmsg.HeaderTaskID) == taskID &&
			m.Header.Get(HeaderOriginalSeq) == strconv.FormatUint(seq, 10)
		return nil
	})
	return found, err
}

// deadSource is what a record is built from.
type deadSource struct {
	seq        uint64 // in the task stream, or in stream when set
	stream     string // "" for the task stream
	subject    string // work subject
	header     nats.Header
	payload    []byte
	taskID     string
	taskType   string
	priority   string
	deliveries int
	reason     string
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

// dlqMsgID is the deduplication ID of the record of the message at seq in
// stream ("" for the task stream).
func (c *Core) dlqMsgID(stream string, seq uint64) string {
	if stream == "" {
		stream = c.topo.TaskStream
	}
	return "dlq-" + stream + "-" + strconv.FormatUint(seq, 10)
}

// recordMsg builds the dead-letter record of s.
func (c *Core) recordMsg(s deadSource) *nats.Msg {
	h := make(nats.Header, len(s.header)+16)
	for k, v := range s.header {
		if hasNatsPrefix(k) || IsRecordHeader(k) {
			continue
		}
		h[k] = append([]string(nil), v...)
	}
	deadCount := 1
	if n, err := strconv.Atoi(s.header.Get(HeaderDeadCount)); err == nil && n > 0 {
		deadCount = n + 1
		if deadCount < n {
			deadCount = n // the task's header is a producer's: no wrap to negative
		}
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
		h.Set(jetstream.MsgIDHeader, c.dlqMsgID(s.stream, s.seq))
	}
	h.Set(taskmsg.HeaderTaskID, s.taskID)
	h.Set(HeaderType, s.taskType)
	h.Set(HeaderPriority, s.priority)
	h.Set(HeaderReason, s.reason)
	h.Set(HeaderOriginalSubject, s.subject)
	h.Set(HeaderOriginalSeq, strconv.FormatUint(s.seq, 10))
	h.Set(HeaderDeliveries, strconv.Itoa(s.deliveries))
	h.Set(HeaderDeadAt, taskmsg.FormatTime(s.deadAt))
	h.Set(HeaderDeadCount, strconv.Itoa(deadCount))
	h.Set(HeaderRoutedBy, s.routedBy)
	if lastErr != "" {
		h.Set(HeaderLastError, Text(lastErr, MaxErrorLen))
		h.Set(HeaderLastErrorAttempt, strconv.Itoa(lastAttempt))
		h.Set(HeaderLastFailure, taskmsg.FormatTime(lastAt))
		if !firstAt.IsZero() {
			h.Set(HeaderFirstFailure, taskmsg.FormatTime(firstAt))
		}
	}
	fitHeaders(h)
	msg := &nats.Msg{Subject: c.topo.DLQSubject(s.taskType), Header: h, Data: s.payload}
	if limit := c.nc.MaxPayload(); limit > 0 && taskmsg.Size(msg) > limit {
		// Make room: first a short error, then no payload at all.
		if e := h.Get(HeaderLastError); e != "" {
			h.Set(HeaderLastError, Text(e, 128))
		}
		if taskmsg.Size(msg) > limit {
			h.Set(HeaderPayloadOmitted, strconv.Itoa(len(s.payload)))
			msg.Data = nil
		}
	}
	return msg
}

// publish stores a record in the dead-letter stream and waits for the
// stream's acknowledgement.
func (c *Core) publish(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, error) {
	ack, err := c.js.PublishMsg(ctx, msg)
	if err != nil {
		if natserr.NoResponse(err) {
			err = fmt.Errorf("%w: %w", natserr.ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("framework: publish dead letter %s: %w", msg.Header.Get(jetstream.MsgIDHeader), err)
	}
	if ack.Stream != c.topo.DLQStream {
		return nil, fmt.Errorf("framework: dead letter %s was stored in stream %s, not %s: check the streams' subjects",
			msg.Header.Get(jetstream.MsgIDHeader), ack.Stream, c.topo.DLQStream)
	}
	return ack, nil
}

// DeleteMsg removes seq from stream. A message that is already gone is not
// an error; gone reports whether this call removed it. (The request is made
// by hand: the jetstream package flattens the server's error into text.)
func (c *Core) DeleteMsg(ctx context.Context, stream string, seq uint64) (bool, error) {
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
			err = fmt.Errorf("%w: %w", natserr.ErrTopologyMissing, err)
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
		return false, fmt.Errorf("framework: delete message %d of %s: %w: %w", seq, stream, natserr.ErrTopologyMissing, r.Error)
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
func (c *Core) routeStored(ctx context.Context, m jsapi.Stored, deliveries int, routedBy string) error {
	taskType, prio, ok := c.topo.task(m.Subject)
	if !ok {
		return fmt.Errorf("framework: %q is not a work subject", m.Subject)
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
			reason: ReasonMaxDeliveries, routedBy: routedBy, hist: hist, deadAt: time.Now(),
		}))
		if err != nil {
			return err
		}
		c.markDead(m.Seq, taskID, ack.Sequence)
		if c.Routed != nil && !ack.Duplicate {
			rt := RoutedTask{TaskID: taskID, Type: taskType, Priority: prio, Header: m.Header, Seq: m.Seq, Deliveries: deliveries,
				Error: fmt.Sprintf("dead-lettered by the %s after %d deliveries (reason %s)", routedBy, deliveries, ReasonMaxDeliveries)}
			if hist.last != nil && hist.last.Error != "" {
				rt.Error += ": " + hist.last.Error
			}
			c.Routed(rt)
		}
		if !ack.Duplicate {
			c.log.Warn("jetflow task reached its max deliveries; dead-lettered",
				slog.String(logKeyTaskID, taskID), slog.String(logKeyTaskType, taskType),
				slog.Uint64("dlq_seq", ack.Sequence), slog.String("routed_by", routedBy))
		}
	}
	if _, err := c.DeleteMsg(ctx, c.topo.TaskStream, m.Seq); err != nil {
		return err
	}
	return nil
}

// RoutedTask is a task the router or the reconciler dead-lettered
// ([Core.Routed]).
type RoutedTask struct {
	TaskID, Type, Priority string
	// Header are the task's headers, as stored (untrusted).
	Header     nats.Header
	Seq        uint64
	Deliveries int
	// Error says how it died, with its last recorded error.
	Error string
}
