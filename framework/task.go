package framework

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/taskctx"
	"github.com/jetflow-io/jetflow/streams"
)

// Priority is a task's priority, encoded in its work subject.
type Priority = streams.Priority

// The four priorities, highest first ([WithPriority]; a worker shares its
// slots among them by [WithWeights]). The zero value is [PriorityNormal].
const (
	// PriorityCritical is the highest priority.
	PriorityCritical = streams.PriorityCritical
	// PriorityHigh comes after PriorityCritical.
	PriorityHigh = streams.PriorityHigh
	// PriorityNormal, the zero value, comes after PriorityHigh.
	PriorityNormal = streams.PriorityNormal
	// PriorityLow is the lowest priority.
	PriorityLow = streams.PriorityLow
)

// Task is one delivery of a task to a handler. A Task is owned by the handler
// call it is passed to; it must not be retained after the handler returns.
type Task struct {
	// ID identifies the task across attempts. Caller-chosen with [WithID],
	// otherwise generated at enqueue.
	ID string
	// Type is the task type, for example "payments.charge".
	Type string
	// Priority is the priority the task was enqueued with.
	Priority Priority
	// Attempt counts deliveries, starting at 1.
	Attempt int
	// MaxAttempts is the task type's attempt limit.
	MaxAttempts int
	// EnqueuedAt is when the task was enqueued.
	EnqueuedAt time.Time
	// ScheduledFor is when a delayed task became due; zero for immediate tasks.
	ScheduledFor time.Time
	// Headers are the message headers, custom ones included. Read-only.
	Headers nats.Header
	// Payload is the encoded payload. Typed handlers receive it decoded.
	Payload []byte
	// Stream and Sequence locate the message in the task stream.
	Stream   string
	Sequence uint64

	baseLogger *slog.Logger
	logger     *slog.Logger
	worker     *Worker
	state      *staterec.Attempt // state tracking: result, delayed "running" record (state_tracking.go)
	wireErr    error             // the message's ID headers are invalid (wire.go)
	subject    string            // the subject it was stored on, from its delivery (set by the server)
}

// Header returns the first value of a header, or "".
func (t *Task) Header(key string) string {
	if t.Headers == nil {
		return ""
	}
	return t.Headers.Get(key)
}

// Logger returns a logger carrying the task's ID, type, priority and attempt.
func (t *Task) Logger() *slog.Logger {
	if t.logger == nil {
		base := t.baseLogger
		if base == nil {
			base = slog.New(slog.DiscardHandler)
		}
		t.logger = base.With(
			slog.String(LogKeyTaskID, t.ID),
			slog.String(LogKeyTaskType, t.Type),
			slog.String(LogKeyPriority, t.Priority.String()),
			slog.Int(LogKeyAttempt, t.Attempt),
		)
	}
	return t.logger
}

// TaskFromContext returns the task a handler's ctx belongs to, or nil.
// Package jetflowtest puts a task in a context the same way, to run
// handlers and middleware outside a worker.
func TaskFromContext(ctx context.Context) *Task {
	t, _ := taskctx.Of(ctx).(*Task)
	return t
}

// LoggerFromContext returns the task's logger ([Task.Logger]) of a handler's
// ctx, or a logger that discards everything outside a handler.
func LoggerFromContext(ctx context.Context) *slog.Logger {
	if t := TaskFromContext(ctx); t != nil {
		return t.Logger()
	}
	return slog.New(slog.DiscardHandler)
}

// TaskInfo says where an enqueued task went.
type TaskInfo struct {
	// ID is the task ID.
	ID string
	// Type and Priority are the task's.
	Type     string
	Priority Priority
	// Subject is the subject published to: the work subject, or the schedule
	// subject of a delayed task.
	Subject string
	// Stream and Sequence locate the stored message.
	Stream   string
	Sequence uint64
	// Duplicate is true when nothing new was stored: a task with the same ID
	// was enqueued within the duplicate window ([WithID]), or a [Unique]
	// enqueue found its key reserved by another task, whose ID this info
	// then holds.
	Duplicate bool
	// ScheduledFor is the due time of a delayed task, zero otherwise.
	ScheduledFor time.Time
}
