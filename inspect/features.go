package inspect

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/ordering"
	engine "github.com/jetflow-io/jetflow/internal/ratelimit"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/streams"
)

// RateLimitInfo is the state of one cluster-wide rate limit, as
// [Operator.RateLimits] reads it.
type RateLimitInfo struct {
	// Name is "type.<task type>", "dep.<dependency>", or for the limit of
	// one key of a type (ratelimit.WithKeyLimit) "key.<task type>.<key in
	// unpadded base64url>".
	Name string
	// Key is the task key of a per-key limit, "" for the others.
	Key string `json:",omitempty"`
	// Limit is the configured limit (of the last worker that reserved).
	Limit ratelimit.Limit
	// LastSecond is the number of permits reserved during the last full
	// second: compare it with the limit per second.
	LastSecond int
	// Next is when the next permit is due: in the past while the limit has
	// room.
	Next time.Time
	// ThrottledUntil is the end of the last [ratelimit.Throttle] pause, zero if none.
	ThrottledUntil time.Time
}

// RateLimits lists the cluster-wide rate limits that were used at least
// once. Records that fail validation are skipped.
func (i *Operator) RateLimits(ctx context.Context) ([]RateLimitInfo, error) {
	infos, err := engine.List(ctx, i.js, i.names.LimitsBucket(), validLimitKey)
	if err != nil {
		return nil, fmt.Errorf("inspect: rate limits: %w", err)
	}
	var out []RateLimitInfo
	for _, in := range infos {
		_, key, _ := ratelimit.ParseKey(in.Key)
		out = append(out, RateLimitInfo{Name: in.Key, Key: key, Limit: ratelimit.Limit(in.Limit), LastSecond: in.LastSecond,
			Next: in.Next, ThrottledUntil: in.ThrottledUntil})
	}
	return out, nil
}

func validLimitKey(k string) bool {
	if t, ok := strings.CutPrefix(k, "type."); ok {
		return streams.ValidateTaskType(t) == nil
	}
	if d, ok := strings.CutPrefix(k, "dep."); ok {
		return topology.ValidateDependency(d) == nil
	}
	if t, _, ok := ratelimit.ParseKey(k); ok {
		return streams.ValidateTaskType(t) == nil
	}
	return false
}

// UniqueReservation is the value stored under a uniqueness key in the unique
// bucket, and what [Operator.UniqueReservations] lists.
type UniqueReservation struct {
	// Key is the bucket key: "<type>.<hash>".
	Key string `json:"-"`
	// TaskID is the task that holds the reservation.
	TaskID string `json:"id"`
	// Type is the task type.
	Type string `json:"type"`
	// Until is when the reservation ends at the latest.
	Until time.Time `json:"until"`
	// UntilDone is true when the task's success ends the reservation early.
	UntilDone bool `json:"until_done,omitempty"`
	// Revision is the reservation's revision in the bucket.
	Revision uint64 `json:"-"`
}

// UniqueReservations lists the current reservations of unique tasks of
// taskType, or of every type when taskType is "". Entries whose key or value
// fails validation are skipped.
func (i *Operator) UniqueReservations(ctx context.Context, taskType string) ([]UniqueReservation, error) {
	if taskType != "" {
		if err := streams.ValidateTaskType(taskType); err != nil {
			return nil, err
		}
	}
	rs, err := uniqueRules.List(ctx, i.js, i.names.UniqueBucket(), taskType)
	var out []UniqueReservation
	for _, r := range rs {
		out = append(out, UniqueReservation(r))
	}
	return out, err
}

// OrderingPartition is the state of one partition of an ordered task type,
// as [Operator.OrderingPartitions] reads it.
type OrderingPartition struct {
	// Type is the task type; Partition and Partitions locate the partition.
	Type                  string
	Partition, Partitions int
	// Pending is the number of tasks waiting behind the head.
	Pending uint64
	// Head is the task in flight (running, or waiting for its retry), nil
	// when the partition is idle.
	Head *OrderingHead
	// PausedUntil is set while a circuit breaker paused the partition.
	PausedUntil string
}

// OrderingHead is the task a partition is waiting for: while it is retried
// (or held), the tasks of every key of the partition behind it wait.
type OrderingHead struct {
	// TaskID and Key identify the task and its ordering key.
	TaskID, Key string
	// Sequence is its stream sequence.
	Sequence uint64
	// Retrying is true when the head was delivered more than once: it
	// failed (or its worker died) and the partition's keys wait for its
	// retry.
	Retrying bool
}

// OrderingPartitions lists the partitions of the ordered task types, with
// their head task when one is in flight. A head delivered more than once
// ([OrderingHead.Blocked]) is a key holding up its partition while it is
// retried. Values read from the server are validated; partitions of
// consumers that do not look like jetflow's are skipped.
func (i *Operator) OrderingPartitions(ctx context.Context) ([]OrderingPartition, error) {
	stream, err := i.js.Stream(ctx, i.names.TaskStream())
	if err != nil {
		return nil, fmt.Errorf("inspect: ordering partitions: %w", err)
	}
	rules := orderingRules(i.names)
	var out []OrderingPartition
	lister := stream.ListConsumers(ctx)
	for ci := range lister.Info() {
		ps, ok := rules.Partition(ctx, stream, ci)
		if !ok {
			continue
		}
		op := OrderingPartition{Type: ps.Type, Partition: ps.Partition, Partitions: ps.Partitions,
			Pending: ps.Pending, PausedUntil: ps.PausedUntil}
		if ps.Head != nil {
			op.Head = (*OrderingHead)(ps.Head)
		}
		out = append(out, op)
	}
	if err := lister.Err(); err != nil {
		return out, fmt.Errorf("inspect: ordering partitions: %w", err)
	}
	return out, nil
}

// BlockedTask is a task that failed for good and keeps its ordering key
// (and its partition) blocked, as [Operator.BlockedTasks] lists it.
type BlockedTask struct {
	// Type and TaskID identify the task; Key is its ordering key.
	Type   string `json:"type"`
	TaskID string `json:"id"`
	Key    string `json:"key"`
	// Error is the last error (at most 1,024 bytes).
	Error string `json:"error"`
	// Since is when it blocked; Attempts how many deliveries it had then.
	Since    time.Time `json:"since"`
	Attempts int       `json:"attempts"`
	// Resolution is "" while blocked, then "retry" or "skip" until the
	// worker holding the task acts on it.
	Resolution string `json:"resolution,omitempty"`
}

// Resolutions of [Operator.ResolveBlocked].
const (
	ResolveRetry = ordering.ResolveRetry // run the task again (one more attempt)
	ResolveSkip  = ordering.ResolveSkip  // dead-letter it; its key moves on
)

// BlockedTasks lists the ordered tasks that failed for good and keep their
// key blocked ([Ordering].BlockOnDeadLetter). Records that fail validation
// are skipped.
func (i *Operator) BlockedTasks(ctx context.Context) ([]BlockedTask, error) {
	recs, err := orderingRules(i.names).ListBlocked(ctx, i.js, i.names.OrderingBucket())
	if err != nil {
		return nil, fmt.Errorf("inspect: blocked tasks: %w", err)
	}
	var out []BlockedTask
	for _, r := range recs {
		out = append(out, BlockedTask(r))
	}
	return out, nil
}

// ResolveBlocked unblocks the key of a blocked ordered task: [ResolveRetry]
// runs it again (one more attempt; if it fails it blocks again),
// [ResolveSkip] dead-letters it with [framework.ErrBlockedSkipped] and lets its key
// move on. The worker holding the task acts within a few seconds. It
// returns [framework.ErrNotFound] when the task is not blocked.
func (i *Operator) ResolveBlocked(ctx context.Context, taskType, id, resolution string) error {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return err
	}
	if err := streams.ValidateID(id); err != nil {
		return err
	}
	if resolution != ResolveRetry && resolution != ResolveSkip {
		return fmt.Errorf("%w: resolution %q, want %q or %q", framework.ErrInvalidOption, resolution, ResolveRetry, ResolveSkip)
	}
	err := ordering.Resolve(ctx, i.js, i.names.OrderingBucket(), taskType, id, resolution)
	if errors.Is(err, ordering.ErrNotBlocked) {
		return fmt.Errorf("%w: task %s of type %s is not blocked", framework.ErrNotFound, id, taskType)
	}
	return err
}
