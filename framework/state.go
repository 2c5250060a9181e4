package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/provision"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/topology"
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
	StatePending TaskState = staterec.Pending
	// StateScheduled: delayed, waiting in a server-side schedule.
	StateScheduled TaskState = staterec.Scheduled
	// StateRunning: a handler is running it.
	StateRunning TaskState = staterec.Running
	// StateRetrying: an attempt failed; it will be retried at NextAttemptAt.
	StateRetrying TaskState = staterec.Retrying
	// StateSucceeded: the handler returned nil and the task was acknowledged.
	StateSucceeded TaskState = staterec.Succeeded
	// StateFailed: it failed for good (permanent error or last attempt)
	// and no dead-letter record was written by the worker.
	StateFailed TaskState = staterec.Failed
	// StateDead: it failed for good and is in the dead-letter stream.
	StateDead TaskState = staterec.Dead
	// StateCancelled: cancelled before it ran ([Inspector.CancelTask]).
	StateCancelled TaskState = staterec.Cancelled
)

// Final reports whether s is an end state: succeeded, failed, dead or
// cancelled.
func (s TaskState) Final() bool { return staterec.Final(string(s)) }

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
	// Progress is the last progress the handler reported
	// ([ReportProgress]); the zero value when none. A value read from the
	// bucket that breaks ReportProgress's rules reads as none.
	Progress Progress `json:"progress,omitzero"`
	// Result is the JSON value the handler stored with [SetResult].
	Result json.RawMessage `json:"result,omitempty"`
	// Revision is the record's KV revision. It is not stored.
	Revision uint64 `json:"-"`
}

// taskRecord converts a record read back (internal/taskstate) to its
// public form; nil stays nil.
func taskRecord(r *staterec.Record) *TaskRecord {
	if r == nil {
		return nil
	}
	prio, _ := streams.ParsePriority(r.Priority) // a record read back names a valid one
	return &TaskRecord{ID: r.ID, Type: r.Type, Priority: prio, State: TaskState(r.State),
		Attempt: r.Attempt, MaxAttempts: r.MaxAttempts, Error: r.Error, Schedule: r.Schedule, Sequence: r.Sequence,
		EnqueuedAt: r.EnqueuedAt, ScheduledFor: r.ScheduledFor, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		NextAttemptAt: r.NextAttemptAt, UpdatedAt: r.UpdatedAt, Progress: Progress(r.Progress), Result: r.Result,
		Revision: r.Revision}
}

// DecodeResult decodes the record's result into v.
func (r *TaskRecord) DecodeResult(v any) error {
	if len(r.Result) == 0 {
		return fmt.Errorf("%w: task %s has no result", ErrNotFound, r.ID)
	}
	return json.Unmarshal(r.Result, v)
}

// WithStateTracking turns task state records on or off. Default off: a
// record costs one more stored message per task, which on a busy server
// halves the throughput of tasks that do little work (see docs/state.md
// for measurements). Per task type, [WithTypeStateTracking] overrides it.
//
// On a worker it controls the records written as tasks run: "running" (see
// [Timings].StateRunningAfter), "retrying", "succeeded", "failed" and "dead".
//
// On a client it controls the "pending" and "scheduled" records written
// after each enqueue, which double the publishes of an enqueue. Without
// them [Inspector.GetTask] still finds a delayed task in its schedule.
// It applies to [NewClient] and [NewWorker].
func WithStateTracking(enabled bool) stateTrackingOption {
	return stateTrackingOption(func(o *options) error { o.stateEnabled = enabled; return nil })
}

// WithStateTTL sets how long task records are kept after their last write:
// the MaxAge of the state bucket, applied when a worker creates or updates
// it ([EnsureBuckets]). Default 7 days.
// It applies to [NewWorker] and [EnsureBuckets].
func WithStateTTL(d time.Duration) retentionOption {
	return retentionOption(func(o *options) error {
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

// WithEffectsTTL sets how long effect records are kept: the MaxAge of the
// effects bucket, applied when a worker creates or updates it
// ([EnsureBuckets]). Keep it longer than a task can be retried or sit in
// the dead-letter stream before a replay. Default 30 days.
// It applies to [NewWorker] and [EnsureBuckets].
func WithEffectsTTL(d time.Duration) retentionOption {
	return retentionOption(func(o *options) error {
		if d < time.Minute {
			return fmt.Errorf("%w: effects TTL %v, want ≥ 1m", ErrInvalidOption, d)
		}
		o.effectsTTL = d
		return nil
	})
}

// EffectsBucket returns the worker's effects bucket
// ([streams.Names.EffectsBucket]), creating the buckets on first use as
// [EnsureBuckets] does, with the worker's retention options. The effects
// ledger (package effects) keeps its records there. It is safe for
// concurrent use.
func (w *Worker) EffectsBucket(ctx context.Context) (jetstream.KeyValue, error) {
	return w.effects.Get(ctx, w.js, w.names.EffectsBucket(), func(ctx context.Context) error {
		return ensureBuckets(ctx, w.js, w.opts)
	})
}

// EnsureBuckets creates the task state, effects, unique-task and rate-limit KV buckets with the task
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
	return provision.EnsureBuckets(ctx, js, o.names, o.stateTTL, o.effectsTTL)
}

// ensureBuckets creates the state and effects buckets with o's retention.
func ensureBuckets(ctx context.Context, js jetstream.JetStream, o *options) error {
	return topology.EnsureRetention(ctx, js, o.names, o.stateTTL, o.effectsTTL)
}

// newStateWriter returns the writer of task records of names' state bucket.
func newStateWriter(nc *nats.Conn, names streams.Names, log *slog.Logger) (*staterec.Writer, error) {
	sw, err := staterec.NewWriter(nc, names.StateBucket(), DefaultMaxPending, log)
	if err != nil {
		return nil, fmt.Errorf("framework: state tracking: %w", err)
	}
	return sw, nil
}

// SetResult stores v, encoded as JSON, with the succeeded record of the
// task a handler's ctx belongs to; [Inspector.GetTask] and [Client.Wait]
// return it. Call it before the handler returns; a later call replaces the
// value. It works whether or not state tracking is on for the task's type:
// a task of an untracked type that sets a result gets its final record
// (and no "pending" or "running" one); the first such task of a worker
// creates the state bucket (one round trip), and an error doing so is
// returned. It returns [ErrNoTask] outside a handler and
// [ErrResultTooLarge] above [MaxResultBytes].
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
	if tr := t.tracker(); tr != nil {
		if err := t.recordsAsked(ctx, tr); err != nil {
			return err
		}
	}
	t.stateOf().Result = data
	return nil
}
