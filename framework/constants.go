package framework

import (
	"time"

	"github.com/jetflow-io/jetflow/internal/enqueue"
	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/internal/unique"
)

// Defaults: the value each setting takes when it is not given (the option
// or field named in each comment).
const (
	// DefaultConcurrency is how many tasks a worker runs at once, across
	// all types ([WithConcurrency]).
	DefaultConcurrency = 32
	// DefaultShutdownTimeout bounds how long [Worker.Run] waits for
	// in-flight tasks after its context ends ([WithShutdownTimeout]).
	DefaultShutdownTimeout = 30 * time.Second
	// DefaultMaxPending is the window of unacknowledged publishes of
	// [Client.EnqueueMany] and [Client.EnqueueSeq] ([WithMaxPending]).
	DefaultMaxPending = 4096
	// DefaultEnqueueTimeout bounds [Client.Enqueue], retries included,
	// when its context has no deadline.
	DefaultEnqueueTimeout = 30 * time.Second

	// DefaultMaxAttempts is the attempts a task gets ([WithMaxAttempts]):
	// 25.
	DefaultMaxAttempts = topology.DefaultMaxDeliver
	// DefaultAckWait is how long the server waits for an attempt's
	// acknowledgement or heartbeat before it redelivers the task
	// ([WithAckWait]): 30 s.
	DefaultAckWait = topology.DefaultAckWait
	// DefaultTimeout is how long a handler may run ([WithTimeout]).
	DefaultTimeout = 30 * time.Minute
	// DefaultMaxInFlight is the tasks in flight per (type, priority)
	// across the cluster ([WithMaxInFlight]): 1000.
	DefaultMaxInFlight = topology.DefaultMaxAckPending

	// DefaultBackoffInitial is the base delay of the first retry
	// ([BackoffPolicy].Initial).
	DefaultBackoffInitial = time.Second
	// DefaultBackoffMax caps the base delay of a retry
	// ([BackoffPolicy].Max).
	DefaultBackoffMax = 10 * time.Minute
	// DefaultBackoffMultiplier is the growth factor of the delay per
	// attempt ([BackoffPolicy].Multiplier).
	DefaultBackoffMultiplier = 2.0
	// DefaultBackoffRandomization is the jitter factor of a retry's delay
	// ([BackoffPolicy].Randomization).
	DefaultBackoffRandomization = 0.5

	// DefaultBatchWait is the default [Batch].MaxWait.
	DefaultBatchWait = 100 * time.Millisecond
	// DefaultPartitions is the partition count of an ordered task type when
	// [Ordering].Partitions is 0.
	DefaultPartitions = 16

	// DefaultReconcileInterval is how often a worker's reconciler looks for
	// max-delivered tasks that no advisory routed ([Timings].ReconcileInterval).
	DefaultReconcileInterval = time.Minute
	// DefaultErrorRetention is how long the errors bucket keeps the record
	// of a failed attempt ([Timings].ErrorRetention): 72 hours.
	DefaultErrorRetention = streamdefs.DefaultErrorRetention
	// DefaultRegistryInterval is how often a worker writes its record in
	// the worker registry ([Timings].RegistryInterval): 5 s, so that a dead
	// worker is gone within 15 s.
	DefaultRegistryInterval = fleet.DefaultInterval
	// DefaultStallLimit is the default stall limit ([Timings].StallLimit): how
	// long a consumer's fetch loop may go without polling the server (it
	// polls every 250 ms) before the worker is not live and [Worker.Run]
	// returns [ErrPullStalled]: its fetch loop is wedged and a restart is
	// the cure.
	DefaultStallLimit = 2 * time.Minute
	// DefaultStrandedCheck is how often a running worker looks for stranded
	// tasks of its types ([Timings].StrandedCheck).
	DefaultStrandedCheck = time.Minute
	// DefaultVersionGrace is how long a task whose payload version no live
	// worker accepts waits before it is dead-lettered ([Timings].VersionGrace).
	DefaultVersionGrace = time.Hour

	// DefaultStateTTL is how long a task record is kept after its last
	// write ([WithStateTTL]): 7 days.
	DefaultStateTTL = streamdefs.DefaultStateTTL
	// DefaultStateRunningAfter is how long an attempt runs before its
	// "running" record is written ([Timings].StateRunningAfter).
	DefaultStateRunningAfter = time.Second
	// DefaultEffectsTTL is how long effect records are kept
	// ([WithEffectsTTL]), 30 days: longer than any redelivery, and as long
	// as the default dead-letter retention, so that a replayed task still
	// skips what it already did.
	DefaultEffectsTTL = streamdefs.DefaultEffectsTTL
)

// Limits: the bounds jetflow checks on settings and on the values a caller
// gives it.
const (
	// MaxKeyLen is the longest task key ([WithKey]), in bytes.
	MaxKeyLen = taskmsg.MaxKeyLen
	// MaxOrderingKeyLen is the longest ordering key ([Ordered]), in bytes.
	MaxOrderingKeyLen = ordering.MaxKeyLen
	// MaxDependencyLen is the longest accepted dependency name, in bytes:
	// 128.
	MaxDependencyLen = topology.MaxDependencyLen
	// MaxPayloadVersion is the highest payload version ([PayloadVersion]).
	MaxPayloadVersion = fleet.MaxPayloadVersion
	// MinUniquePeriod is the shortest period of [Unique]: the server's
	// per-message TTLs count whole seconds.
	MinUniquePeriod = time.Second
	// MaxUniqueKeyLen is the longest caller key accepted by [UniqueKey], in
	// bytes. Keys are hashed, so any bytes are allowed.
	MaxUniqueKeyLen = 4096
	// MaxBatchSize bounds [Batch].Size.
	MaxBatchSize = 10000
	// MaxPrefetch bounds [WithPrefetch].
	MaxPrefetch = 256
	// MinStallLimit is the shortest stall limit [Timings].StallLimit accepts:
	// a few idle heartbeats of an idle consumer.
	MinStallLimit = 3 * time.Second
	// MinRegistryInterval is the shortest interval [Timings].RegistryInterval
	// accepts.
	MinRegistryInterval = fleet.MinInterval
	// MaxRegistryInterval is the longest interval [Timings].RegistryInterval
	// accepts.
	MaxRegistryInterval = fleet.MaxInterval
	// MaxProgressMessage is the longest message [ReportProgress] accepts,
	// in bytes.
	MaxProgressMessage = staterec.MaxProgressMessage
	// ProgressInterval is how often a task's progress record is written at
	// most: reports in between replace each other, and the latest is written
	// when the interval has passed.
	ProgressInterval = staterec.ProgressInterval
	// MaxResultBytes is the largest JSON result [SetResult] accepts.
	MaxResultBytes = 4096
)

// Header names jetflow sets on task messages (read them from
// [Task].Headers). Custom headers given with [WithHeader] must not start
// with "Jetflow-" or "Nats-".
const (
	// HeaderTaskID carries the task ID on delayed and replayed tasks (the
	// server strips Nats-Msg-Id when a schedule fires). Immediate tasks
	// carry it in Nats-Msg-Id only; on a task no schedule fired, a
	// HeaderTaskID that differs from Nats-Msg-Id gets the task
	// dead-lettered as invalid.
	HeaderTaskID = taskmsg.HeaderTaskID
	// HeaderEnqueuedAt is the enqueue time (RFC 3339, nanoseconds) of a
	// delayed task. For immediate tasks the stream timestamp is used.
	HeaderEnqueuedAt = taskmsg.HeaderEnqueuedAt
	// HeaderScheduledFor is the time (RFC 3339, nanoseconds) before which a
	// delayed task must not start.
	HeaderScheduledFor = taskmsg.HeaderScheduledFor
	// HeaderEncoding names the payload codec when it is not JSON: "raw" for
	// bytes given as []byte, otherwise [Codec.Name].
	HeaderEncoding = taskmsg.HeaderEncoding
	// HeaderKey carries a task's key ([WithKey]).
	HeaderKey = enqueue.HeaderKey
	// HeaderOrderingKey carries the ordering key of an ordered task
	// ([Ordered]).
	HeaderOrderingKey = ordering.HeaderKey
	// HeaderAwaited marks a task enqueued with [Awaited]: its worker writes
	// its final state record even where state tracking is off for its type.
	HeaderAwaited = staterec.HeaderAwaited
	// HeaderPayloadVersion is the payload version of a task, a decimal
	// integer from 1 to [MaxPayloadVersion] without sign or leading zero; a
	// task without it is version 1.
	HeaderPayloadVersion = fleet.HeaderPayloadVersion
	// HeaderVersionRefusedSince is when a task handed back for its payload
	// version was first handed back (RFC 3339).
	HeaderVersionRefusedSince = taskmsg.HeaderVersionRefusedSince
	// HeaderVersionRefusals is how many times a task was handed back for
	// its payload version.
	HeaderVersionRefusals = taskmsg.HeaderVersionRefusals

	// HeaderUniqueKey is the uniqueness key of a unique task, set by the
	// client (workers read it back and validate it before use):
	// "<type>.<64 hex digits>", the SHA-256 of the caller's key or of the
	// encoded payload.
	HeaderUniqueKey = unique.HeaderKey
	// HeaderUniqueUntil is when a unique task's reservation ends at the
	// latest (RFC 3339).
	HeaderUniqueUntil = unique.HeaderUntil
	// HeaderUniqueRevision is the revision of the reservation in the unique
	// bucket; set only on tasks that release it when they succeed
	// ([UniqueUntilDone]).
	HeaderUniqueRevision = unique.HeaderRevision

	// HeaderSchedule is the name of the repeating schedule a task came
	// from. jetflow sets it, HeaderScheduleSpec, HeaderScheduleZone and
	// HeaderScheduleHash on a schedule message; the server copies them
	// (with the schedule's payload and custom headers) onto every task it
	// fires, while it strips the Nats-Schedule* ones.
	HeaderSchedule = taskmsg.HeaderSchedule
	// HeaderScheduleSpec is the schedule's normalised expression.
	HeaderScheduleSpec = taskmsg.HeaderScheduleSpec
	// HeaderScheduleZone is the schedule's IANA time zone, when set.
	HeaderScheduleZone = taskmsg.HeaderScheduleZone
	// HeaderScheduleHash fingerprints the schedule's definition so that
	// registering an identical definition again changes nothing.
	HeaderScheduleHash = taskmsg.HeaderScheduleHash
	// HeaderScheduler is set by the server on a task it fired from a
	// schedule: the subject of that schedule, for example
	// "jetflow.cron.nightly".
	HeaderScheduler = taskmsg.HeaderScheduler
	// HeaderScheduleNext is set by the server on a task it fired from a
	// schedule: the schedule's next fire time (RFC 3339 with nanoseconds),
	// or "purge" for a one-shot schedule.
	HeaderScheduleNext = taskmsg.HeaderScheduleNext
)

// Log attribute keys of the worker's log records ([WithLogger]): the task
// keys are on every task log record.
const (
	// LogKeyTaskID is the key of the task ID.
	LogKeyTaskID = "task_id"
	// LogKeyTaskType is the key of the task type.
	LogKeyTaskType = "task_type"
	// LogKeyPriority is the key of the task's priority.
	LogKeyPriority = "priority"
	// LogKeyAttempt is the key of the attempt number, from 1.
	LogKeyAttempt = "attempt"
	// LogKeyError is the key of an error.
	LogKeyError = "error"
	// LogKeyDependency is the key of a dependency name.
	LogKeyDependency = "dependency"
)
