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

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/streams"
)

// Task state tracking keeps one record per task, under the task ID, in the
// KV bucket [streams.Names.StateBucket] ("JETFLOW_STATE"). Writers never wait:
// a record is an asynchronous publish to "$KV.<bucket>.<key>" whose
// acknowledgement is only checked for errors. See docs/state.md.

// TaskState is the lifecycle state of a task, as recorded by state tracking.
type TaskState string

// Task states.
const (
	// StatePending: enqueued, waiting for a worker.
	StatePending TaskState = "pending"
	// StateScheduled: delayed, waiting in a server-side schedule.
	StateScheduled TaskState = "scheduled"
	// StateRunning: a handler is running it.
	StateRunning TaskState = "running"
	// StateRetrying: an attempt failed; it will be retried at NextAttemptAt.
	StateRetrying TaskState = "retrying"
	// StateSucceeded: the handler returned nil and the task was acknowledged.
	StateSucceeded TaskState = "succeeded"
	// StateFailed: it failed for good (permanent error or last attempt)
	// and no dead-letter record was written by the worker.
	StateFailed TaskState = "failed"
	// StateDead: it failed for good and is in the dead-letter stream.
	StateDead TaskState = "dead"
	// StateCancelled: cancelled before it ran ([Inspector.CancelTask]).
	StateCancelled TaskState = "cancelled"
)

// Final reports whether s is an end state: succeeded, failed, dead or
// cancelled.
func (s TaskState) Final() bool {
	switch s {
	case StateSucceeded, StateFailed, StateDead, StateCancelled:
		return true
	}
	return false
}

// TaskRecord is the state record of one task. Each write replaces the whole
// record; fields a writer does not know are left empty.
type TaskRecord struct {
	ID       string    `json:"id"`
	Type     string    `json:"type,omitempty"`
	Priority Priority  `json:"priority"`
	State    TaskState `json:"state"`
	// Attempt is the current or last attempt, from 1; MaxAttempts the limit.
	Attempt     int `json:"attempt,omitempty"`
	MaxAttempts int `json:"max_attempts,omitempty"`
	// Error is the error of the last failed attempt (at most 1 KiB).
	Error string `json:"error,omitempty"`
	// Schedule names the repeating schedule that fired the task.
	Schedule string `json:"schedule,omitempty"`
	// Sequence is the task message's sequence in its stream.
	Sequence     uint64    `json:"seq,omitempty"`
	EnqueuedAt   time.Time `json:"enqueued_at,omitzero"`
	ScheduledFor time.Time `json:"scheduled_for,omitzero"`
	// StartedAt is when the current or last attempt started.
	StartedAt time.Time `json:"started_at,omitzero"`
	// FinishedAt is when the task reached a final state.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// NextAttemptAt is when a retrying task runs again.
	NextAttemptAt time.Time `json:"next_attempt_at,omitzero"`
	// UpdatedAt is when the record was written.
	UpdatedAt time.Time `json:"updated_at"`
	// Result is the JSON value the handler stored with [SetResult].
	Result json.RawMessage `json:"result,omitempty"`
	// Revision is the record's KV revision. It is not stored.
	Revision uint64 `json:"-"`
}

// DecodeResult decodes the record's result into v.
func (r *TaskRecord) DecodeResult(v any) error {
	if len(r.Result) == 0 {
		return fmt.Errorf("%w: task %s has no result", ErrNotFound, r.ID)
	}
	return json.Unmarshal(r.Result, v)
}

// State tracking defaults and limits.
const (
	// DefaultStateTTL is how long a task record is kept after its last write.
	DefaultStateTTL = 7 * 24 * time.Hour
	// MaxResultBytes is the largest JSON result [SetResult] accepts.
	MaxResultBytes = 4096
	// maxRecordError bounds the error text of a record.
	maxRecordError = 1024
)

// Sentinel errors of state tracking and the effects ledger.
var (
	// ErrNoTask reports a call that needs a task's context ([SetResult],
	// [Once]) made outside a handler.
	ErrNoTask = errors.New("framework: not called from a task handler")
	// ErrResultTooLarge reports a [SetResult] value above [MaxResultBytes].
	ErrResultTooLarge = errors.New("framework: task result too large")
)

// DefaultStateRunningAfter is how long an attempt runs before its
// "running" record is written ([WithStateRunningAfter]).
const DefaultStateRunningAfter = time.Second

// WithStateTracking turns task state records on or off. Default off: a
// record costs one more stored message per task, which on a busy server
// halves the throughput of tasks that do little work (see docs/state.md
// for measurements). Per task type, [WithTypeStateTracking] overrides it.
//
// On a worker it controls the records written as tasks run: "running" (see
// [WithStateRunningAfter]), "retrying", "succeeded", "failed" and "dead".
//
// On a client it controls the "pending" and "scheduled" records written
// after each enqueue, which double the publishes of an enqueue. Without
// them [Inspector.GetTask] still finds a delayed task in its schedule.
func WithStateTracking(enabled bool) StateTrackingOption {
	return StateTrackingOption(func(o *options) error { o.stateEnabled = enabled; return nil })
}

// WithStateRunningAfter sets how long an attempt must run before the worker
// writes its "running" record. Short tasks then cost one record (their
// outcome) instead of two; a task is seen "running" only once it ran for d.
// 0 writes the record when every attempt starts. Workers only. Default 1 s.
func WithStateRunningAfter(d time.Duration) WorkerOption {
	return workerOnly(func(o *options) error {
		if d < 0 {
			return fmt.Errorf("%w: state running-after %v, want ≥ 0", ErrInvalidOption, d)
		}
		o.stateRunningAfter = d
		return nil
	})
}

// WithStateTTL sets how long task records are kept after their last write:
// the MaxAge of the state bucket, applied when a worker creates or updates
// it ([EnsureBuckets]). Workers only. Default 7 days.
func WithStateTTL(d time.Duration) RetentionOption {
	return RetentionOption(func(o *options) error {
		if d < time.Second {
			return fmt.Errorf("%w: state TTL %v, want ≥ 1s", ErrInvalidOption, d)
		}
		o.stateTTL = d
		return nil
	})
}

// WithTypeStateTracking turns task state records of one task type on or
// off, overriding the worker's [WithStateTracking]. Default: the worker's.
func WithTypeStateTracking(enabled bool) HandlerOption {
	return func(c *handlerConfig) error {
		c.stateTracking = -1
		if enabled {
			c.stateTracking = 1
		}
		return nil
	}
}

// EnsureBuckets creates the task state and effects KV buckets with the task
// stream's storage and replica count, and sets the TTLs given with
// [WithStateTTL] and [WithEffectsTTL] on existing buckets (a TTL left at
// its default does not change an existing bucket). Workers call it at start; call it yourself
// before enqueueing with a client while no worker ever ran, or the first
// "pending" records are lost. The task stream must exist.
func EnsureBuckets(ctx context.Context, js jetstream.JetStream, opts ...BucketsOption) error {
	o, err := newOptions(opts, BucketsOption.applyBuckets)
	if err != nil {
		return err
	}
	return ensureBuckets(ctx, js, o)
}

func ensureBuckets(ctx context.Context, js jetstream.JetStream, o *options) error {
	names := o.names
	s, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("framework: ensure buckets: %w: %w", ErrTopologyMissing, err)
		}
		return fmt.Errorf("framework: ensure buckets: %w", err)
	}
	cfg := s.CachedInfo().Config
	for _, b := range []struct {
		bucket, description string
		ttl, defaultTTL     time.Duration
	}{
		{names.StateBucket(), "jetflow task state: one record per task ID", o.stateTTL, DefaultStateTTL},
		{names.EffectsBucket(), "jetflow effects ledger: side effects applied per task (framework.Once)", o.effectsTTL, DefaultEffectsTTL},
	} {
		kv := jetstream.KeyValueConfig{Bucket: b.bucket, Description: b.description, History: 1,
			TTL: b.ttl, Storage: cfg.Storage, Replicas: cfg.Replicas}
		if kv.TTL == 0 {
			kv.TTL = b.defaultTTL
		}
		if err := jsapi.EnsureBucket(ctx, js, kv, b.ttl != 0); err != nil {
			return err
		}
	}
	return nil
}

// stateStallRetries bounds how long a record write waits for room in the
// asynchronous publish window: 25 stalls of 200 ms.
const stateStallRetries = 25

// stateWriter writes task records with asynchronous publishes.
type stateWriter struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	prefix string // "$KV.<bucket>."
	log    *slog.Logger
	errs   atomic.Uint64
}

func newStateWriter(nc *nats.Conn, names streams.Names, log *slog.Logger) (*stateWriter, error) {
	sw := &stateWriter{nc: nc, prefix: "$KV." + names.StateBucket() + ".", log: log}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(DefaultMaxPending),
		jetstream.WithPublishAsyncErrHandler(sw.failed))
	if err != nil {
		return nil, fmt.Errorf("framework: state tracking: %w", err)
	}
	sw.js = js
	return sw, nil
}

// write publishes rec without waiting. With onlyIfNew the record is stored
// only when the task has none yet (an enqueue must not overwrite what a
// worker already wrote).
func (sw *stateWriter) write(rec *TaskRecord, onlyIfNew bool) {
	msg := &nats.Msg{Subject: sw.prefix + stateKey(rec.ID), Data: rec.appendJSON(make([]byte, 0, 256))}
	if !onlyIfNew {
		// Worker records overwrite whatever is there: publish without
		// asking for an acknowledgement. It halves the client's cost of a
		// record; a record the stream could not store is lost, like one
		// whose asynchronous acknowledgement reported an error.
		if err := sw.nc.PublishMsg(msg); err != nil {
			sw.fail(rec.ID, err)
		}
		return
	}
	msg.Header = nats.Header{jetstream.ExpectedLastSubjSeqHeader: []string{"0"}}
	_, err := sw.js.PublishMsgAsync(msg)
	// A full window (DefaultMaxPending writes awaiting their
	// acknowledgement) makes the publish wait 200 ms and give up: wait
	// longer, slowing tasks down rather than losing records, but not
	// forever (a server that does not answer).
	for i := 1; errors.Is(err, jetstream.ErrTooManyStalledMsgs) && i < stateStallRetries; i++ {
		_, err = sw.js.PublishMsgAsync(msg)
	}
	if err != nil {
		sw.fail(rec.ID, err)
	}
}

// failed is the asynchronous publish error handler.
func (sw *stateWriter) failed(_ jetstream.JetStream, msg *nats.Msg, err error) {
	if msg.Header.Get(jetstream.ExpectedLastSubjSeqHeader) == "0" && natserr.WrongLastSequence(err) {
		return // a worker wrote the record first: expected
	}
	sw.fail(strings.TrimPrefix(msg.Subject, sw.prefix), err)
}

func (sw *stateWriter) fail(key string, err error) {
	n := sw.errs.Add(1)
	if n == 1 || n%1000 == 0 {
		hint := ""
		if natserr.NoResponse(err) {
			hint = " (does the state bucket exist? see framework.EnsureBuckets)"
		}
		sw.log.Warn("jetflow could not write a task state record"+hint,
			slog.String("key", key), slog.Uint64("failures", n), slog.Any(LogKeyError, err))
	}
}

// stateKey maps a task ID to its KV key, one to one. IDs made of A-Z a-z
// 0-9 _ - (every generated ID, and the IDs of scheduled ticks) are their own
// key; any other byte, '=' included, is written "=XX" in hex, so "a:b"
// becomes "a=3Ab".
func stateKey(id string) string {
	clean := true
	for i := 0; i < len(id) && clean; i++ {
		clean = keySafe(id[i])
	}
	if clean && id != "" {
		return id
	}
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(id) + 8)
	for i := 0; i < len(id); i++ {
		c := id[i]
		if keySafe(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	if b.Len() == 0 {
		return "=" // the empty ID
	}
	return b.String()
}

func keySafe(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// installClientState gives c its state writer when state tracking was
// turned on for it: it writes "pending" and "scheduled" records after each
// enqueue (see Client.enqueued).
func (c *Client) installClientState() {
	if !c.opts.stateEnabled {
		return
	}
	sw, err := newStateWriter(c.nc, c.names, c.opts.logger)
	if err != nil {
		c.opts.logger.Warn("jetflow state tracking disabled", slog.Any(LogKeyError, err))
		return
	}
	c.stateWriter = sw
}

// writeEnqueued writes the "pending" or "scheduled" record of a new task.
func (c *Client) writeEnqueued(info TaskInfo) {
	if c.stateWriter == nil || info.Duplicate {
		return
	}
	now := time.Now().UTC()
	rec := TaskRecord{ID: info.ID, Type: info.Type, Priority: info.Priority, State: StatePending,
		Sequence: info.Sequence, EnqueuedAt: now, UpdatedAt: now}
	if !info.ScheduledFor.IsZero() {
		rec.State, rec.ScheduledFor, rec.Sequence = StateScheduled, info.ScheduledFor.UTC(), 0
	}
	c.stateWriter.write(&rec, true)
}

// installState gives w its state tracking extension. Its events cost a map
// lookup per task when no type is tracked; its start-up step creates the
// writer and the buckets only when one is.
func (w *Worker) installState() {
	w.addExtension(extension{
		name:     "state",
		prepare:  w.prepareState,
		started:  w.stateStarted,
		finished: w.stateFinished,
	})
}

// prepareState creates the record writer and the buckets when at least
// one registered type is tracked.
func (w *Worker) prepareState(ctx context.Context, _ *Worker) error {
	tracked := false
	for _, tt := range w.order {
		tracked = tracked || w.typeTracked(tt)
	}
	if !tracked {
		return nil // Once creates the effects bucket when first used
	}
	if err := ensureBuckets(ctx, w.js, w.opts); err != nil {
		return err
	}
	sw, err := newStateWriter(w.nc, w.names, w.log)
	if err != nil {
		return err
	}
	w.stateWriter = sw
	return nil
}

// stateRecord starts the record of t in state st.
func (w *Worker) stateRecord(t *Task, st TaskState, now time.Time) *TaskRecord {
	rec := &TaskRecord{
		ID: t.ID, Type: t.Type, Priority: t.Priority, State: st,
		Attempt: t.Attempt, MaxAttempts: t.MaxAttempts, Sequence: t.Sequence,
		EnqueuedAt: t.EnqueuedAt.UTC(), UpdatedAt: now,
		Schedule: t.Header(HeaderSchedule),
	}
	if !t.ScheduledFor.IsZero() {
		rec.ScheduledFor = t.ScheduledFor.UTC()
	}
	return rec
}

// stateTracked reports whether t's type has state tracking.
func (w *Worker) stateTracked(t *Task) bool {
	return w.stateWriter != nil && w.typeTracked(w.types[t.Type])
}

// typeTracked reports whether tasks of tt get state records.
func (w *Worker) typeTracked(tt *typeRunner) bool {
	if tt == nil {
		return false
	}
	switch tt.cfg.stateTracking {
	case 1:
		return true
	case -1:
		return false
	}
	return w.opts.stateEnabled
}

// taskState is the per-task state of state tracking.
type taskState struct {
	result []byte // SetResult

	// The delayed "running" record: mu orders it before the final record.
	mu    sync.Mutex
	timer *time.Timer
	final bool
}

func (w *Worker) stateStarted(_ context.Context, t *Task) {
	if !w.stateTracked(t) {
		return
	}
	start := time.Now().UTC()
	running := func() {
		rec := w.stateRecord(t, StateRunning, time.Now().UTC())
		rec.StartedAt = start
		w.stateWriter.write(rec, false)
	}
	after := w.opts.stateRunningAfter
	if after == 0 {
		running()
		return
	}
	st := t.stateOf()
	st.mu.Lock()
	if st.timer != nil {
		st.timer.Stop() // an in-process rerun (held by a breaker) restarts the clock
	}
	st.timer = time.AfterFunc(after, func() {
		st.mu.Lock()
		defer st.mu.Unlock()
		if !st.final {
			running()
		}
	})
	st.mu.Unlock()
}

// stateFinal writes the attempt's outcome, after its "running" record if
// that one is being written.
func (w *Worker) stateFinal(t *Task, rec *TaskRecord) {
	if st := t.state; st != nil {
		st.mu.Lock()
		st.final = true
		if st.timer != nil {
			st.timer.Stop()
			st.timer = nil
		}
		st.mu.Unlock()
	}
	w.stateWriter.write(rec, false)
}

// stateFinished writes the record of an attempt's outcome.
func (w *Worker) stateFinished(_ context.Context, t *Task, o Outcome) {
	if !w.stateTracked(t) {
		return
	}
	now := time.Now().UTC()
	var rec *TaskRecord
	switch o.Action {
	case ActionAck:
		rec = w.stateRecord(t, StateSucceeded, now)
		rec.StartedAt, rec.FinishedAt = now.Add(-o.Took), now
		if t.state != nil {
			rec.Result = t.state.result
		}
	case ActionRetry:
		rec = w.stateRecord(t, StateRetrying, now)
		rec.Error, rec.NextAttemptAt = truncate(o.Err.Error(), maxRecordError), now.Add(o.Delay)
	case ActionFail:
		st := StateFailed
		if o.DeadLettered {
			st = StateDead
		}
		rec = w.stateRecord(t, st, now)
		rec.Error, rec.FinishedAt = truncate(o.Err.Error(), maxRecordError), now
	default:
		return
	}
	w.stateFinal(t, rec)
}

// stateOf returns t's tracking state, creating it.
func (t *Task) stateOf() *taskState {
	if t.state == nil {
		t.state = &taskState{}
	}
	return t.state
}

// SetResult stores v, encoded as JSON, with the succeeded record of the
// task a handler's ctx belongs to; [Inspector.GetTask] returns it. Call it
// before the handler returns; a later call replaces the value. It returns
// [ErrNoTask] outside a handler and [ErrResultTooLarge] above
// [MaxResultBytes]. Without state tracking the value is dropped.
func SetResult(ctx context.Context, v any) error {
	t := TaskFromContext(ctx)
	if t == nil {
		return ErrNoTask
	}
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("framework: set result of task %s: %w", t.ID, err)
	}
	if len(data) > MaxResultBytes {
		return fmt.Errorf("%w: %d bytes, the limit is %d; store large results elsewhere and keep a reference",
			ErrResultTooLarge, len(data), MaxResultBytes)
	}
	t.stateOf().result = data
	return nil
}

// appendJSON appends the record as JSON, byte for byte what encoding/json
// produces, without reflection: records are written for every task.
func (r *TaskRecord) appendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, r.ID)
	if r.Type != "" {
		b = append(b, `,"type":`...)
		b = appendJSONString(b, r.Type)
	}
	b = append(b, `,"priority":`...)
	if r.Priority.Valid() {
		b = appendJSONString(b, r.Priority.String())
	} else {
		b = append(b, `"normal"`...)
	}
	b = append(b, `,"state":`...)
	b = appendJSONString(b, string(r.State))
	if r.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(r.Attempt), 10)
	}
	if r.MaxAttempts != 0 {
		b = append(b, `,"max_attempts":`...)
		b = strconv.AppendInt(b, int64(r.MaxAttempts), 10)
	}
	if r.Error != "" {
		b = append(b, `,"error":`...)
		b = appendJSONString(b, r.Error)
	}
	if r.Schedule != "" {
		b = append(b, `,"schedule":`...)
		b = appendJSONString(b, r.Schedule)
	}
	if r.Sequence != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, r.Sequence, 10)
	}
	for _, f := range [...]struct {
		name string
		t    time.Time
	}{
		{`,"enqueued_at":`, r.EnqueuedAt},
		{`,"scheduled_for":`, r.ScheduledFor},
		{`,"started_at":`, r.StartedAt},
		{`,"finished_at":`, r.FinishedAt},
		{`,"next_attempt_at":`, r.NextAttemptAt},
	} {
		if !f.t.IsZero() {
			b = append(b, f.name...)
			b = appendJSONTime(b, f.t)
		}
	}
	b = append(b, `,"updated_at":`...)
	b = appendJSONTime(b, r.UpdatedAt)
	if len(r.Result) > 0 {
		b = append(b, `,"result":`...)
		b = append(b, r.Result...)
	}
	return append(b, '}')
}

// appendJSONString appends s as a JSON string. Strings of plain printable
// ASCII are copied; anything else goes through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, err := json.Marshal(s)
			if err != nil {
				return append(b, `""`...)
			}
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendJSONTime(b []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		q, err := t.MarshalJSON()
		if err != nil {
			return append(b, `""`...)
		}
		return append(b, q...)
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"')
}
