package inspect

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/queuestate"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// QueueActivity is what the consumer of one (task type, priority) queue
// reports beyond the counts of [QueueStat]: how far it got and how old its
// oldest waiting task is.
type QueueActivity struct {
	Type     string
	Priority framework.Priority
	// Consumer is the queue's durable consumer.
	Consumer string
	// Delivered counts the deliveries the consumer made since it was
	// created, redeliveries included. Its rate is the queue's throughput.
	Delivered uint64
	// Acked is the consumer's ack floor: deliveries acknowledged in order.
	Acked uint64
	// Waiting counts tasks not yet delivered (as [QueueStat].Pending).
	Waiting uint64
	// InFlight counts delivered tasks not yet acknowledged.
	InFlight int
	// Pulling counts pull requests waiting on the server: idle workers
	// asking for tasks. 0 with Waiting > 0 means nobody is pulling.
	Pulling int
	// OldestWaiting is when the oldest task not yet delivered was stored;
	// zero when none waits.
	OldestWaiting time.Time
	// LastDelivery is when the consumer last delivered a task; zero when it
	// never did.
	LastDelivery time.Time
	// Paused is true while the consumer is paused, by hand
	// ([Operator.PauseQueue]) or by an open circuit breaker, until
	// PausedUntil.
	Paused      bool
	PausedUntil time.Time
}

// QueueActivity returns the activity of every queue consumer on the task
// stream, sorted by type then priority (highest first): one paged consumer
// list, plus one direct get per queue with waiting tasks to date its oldest.
func (i *Operator) QueueActivity(ctx context.Context) ([]QueueActivity, error) {
	stream, err := i.js.Stream(ctx, i.names.TaskStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("inspect: queue activity: %w: %w", framework.ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("inspect: queue activity: %w", err)
	}
	isQueue := func(filter string) bool { _, _, err := i.names.ParseTaskSubject(filter); return err == nil }
	acts, err := queuestate.Activities(ctx, i.nc, stream, i.names.TaskStream(), isQueue)
	if err != nil {
		return nil, fmt.Errorf("inspect: queue activity: %w", err)
	}
	// The consumers of the other task partitions add to the same queues
	// (partitions.go).
	if acts, err = i.partitionActivities(ctx, acts, isQueue); err != nil {
		return nil, fmt.Errorf("inspect: queue activity: %w", err)
	}
	var out []QueueActivity
	for _, a := range acts {
		p, typ, _ := i.names.ParseTaskSubject(a.Filter)
		out = append(out, QueueActivity{Type: typ, Priority: p, Consumer: a.Consumer, Delivered: a.Delivered,
			Acked: a.Acked, Waiting: a.Waiting, InFlight: a.InFlight, Pulling: a.Pulling,
			OldestWaiting: a.OldestWaiting, LastDelivery: a.LastDelivery, Paused: a.Paused, PausedUntil: a.PausedUntil})
	}
	slices.SortFunc(out, func(a, b QueueActivity) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Priority.Rank() - b.Priority.Rank()
	})
	return out, nil
}

// ScheduledFilter selects delayed tasks for [Operator.ScheduledTasks]. The
// zero value selects all.
type ScheduledFilter struct {
	// Type selects one task type.
	Type string
	// Limit is the most tasks returned, those due first. Default
	// [DefaultScheduledLimit], at most [MaxScheduledScan].
	Limit int
}

// DefaultScheduledLimit is the default [ScheduledFilter.Limit].
const DefaultScheduledLimit = 100

// ScheduledTasks lists delayed tasks waiting in their schedules, those due
// first, as records in [framework.StateScheduled] with their ID, type, priority, due
// time ([framework.TaskRecord.ScheduledFor]) and enqueue time. It reads at most
// [MaxScheduledScan] schedules with batched direct gets (a thousand per
// round trip); truncated is true when there were more. A delayed task whose
// schedule the server dropped (see [QueueStats].BrokenScheduled) is not
// listed: [Operator.ListTasks] lists it, broken.
func (i *Operator) ScheduledTasks(ctx context.Context, f ScheduledFilter) (tasks []framework.TaskRecord, truncated bool, err error) {
	tasks, _, truncated, err = i.scheduledTasks(ctx, f)
	return tasks, truncated, err
}

// brokenDelayed is a delayed task whose schedule subject's last message is
// not a schedule: the server dropped its schedule.
type brokenDelayed struct {
	// rec describes the task from its last schedule, when one is left
	// (ID alone otherwise).
	rec framework.TaskRecord
	// seq and at locate the message that broke it; reason says what it is.
	seq    uint64
	at     time.Time
	reason string
}

// scheduledTasks returns the delayed tasks of [Operator.ScheduledTasks] and
// the broken ones, of f's type (broken ones of unknown type only without a
// type filter).
func (i *Operator) scheduledTasks(ctx context.Context, f ScheduledFilter) (tasks []framework.TaskRecord, broken []brokenDelayed, truncated bool, err error) {
	if f.Type != "" {
		if err := streams.ValidateTaskType(f.Type); err != nil {
			return nil, nil, false, fmt.Errorf("%w: filter: %w", framework.ErrInvalidOption, err)
		}
	}
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultScheduledLimit
	}
	limit = min(limit, MaxScheduledScan)
	record := func(id string, m jsapi.Stored) (framework.TaskRecord, bool) {
		p := topology.ParsePending(i.names, m.Header)
		if p.TargetErr != nil {
			return framework.TaskRecord{}, false
		}
		r := framework.TaskRecord{ID: id, Type: p.Type, Priority: p.Priority, State: framework.StateScheduled, Sequence: m.Seq,
			EnqueuedAt: m.Time, ScheduledFor: p.Due, UpdatedAt: m.Time}
		if !p.EnqueuedAt.IsZero() {
			r.EnqueuedAt = p.EnqueuedAt
		}
		return r, true
	}
	// The delay stream first, then the schedule stream: a mover stores a
	// schedule before it removes its delayed task, so a task moving between
	// the two scans is seen twice (once kept), never missed.
	seen := make(map[string]bool)
	keep := func(r framework.TaskRecord) {
		if f.Type == "" || r.Type == f.Type {
			tasks = append(tasks, r)
		}
	}
	truncated, err = queuestate.ScanSchedules(ctx, i.nc, i.names.DelayStream(), i.names.DelaySubject(""), MaxScheduledScan,
		func(id string, m jsapi.Stored) {
			if streams.ValidateID(id) != nil || seen[id] {
				return
			}
			seen[id] = true
			if r, ok := record(id, m); ok {
				keep(r)
			}
		})
	if errors.Is(err, jsapi.ErrNoStream) {
		err = nil // a deployment from before the delay stream
	}
	// In the schedule stream the last message of a subject decides: a
	// schedule followed by any other message is one the server dropped.
	type subject struct {
		rec    *framework.TaskRecord // from the last schedule
		broken *brokenDelayed
	}
	var order []string
	subjects := make(map[string]*subject)
	if err == nil {
		var more bool
		more, err = queuestate.ScanSchedules(ctx, i.nc, i.names.ScheduleStream(), i.names.ScheduleSubject(""), MaxScheduledScan,
			func(id string, m jsapi.Stored) {
				if streams.ValidateID(id) != nil || seen[id] {
					return
				}
				s := subjects[id]
				if s == nil {
					s = &subject{}
					subjects[id] = s
					order = append(order, id)
				}
				if reason := taskmsg.DelayedProblem(m.Header, m.Data); reason != "" {
					s.broken = &brokenDelayed{seq: m.Seq, at: m.Time, reason: reason}
					return
				}
				s.broken = nil
				if r, ok := record(id, m); ok {
					s.rec = &r
				} else {
					s.rec = nil
				}
			})
		truncated = truncated || more
	}
	if err != nil {
		if errors.Is(err, jsapi.ErrNoStream) {
			return nil, nil, false, fmt.Errorf("inspect: scheduled tasks: %w: %w", framework.ErrTopologyMissing, err)
		}
		return nil, nil, false, fmt.Errorf("inspect: scheduled tasks: %w", err)
	}
	for _, id := range order {
		s := subjects[id]
		switch {
		case s.broken != nil:
			b := *s.broken
			b.rec = framework.TaskRecord{ID: id, State: framework.StateScheduled}
			if s.rec != nil {
				b.rec = *s.rec
			}
			if f.Type == "" || b.rec.Type == f.Type {
				broken = append(broken, b)
			}
		case s.rec != nil:
			keep(*s.rec)
		}
	}
	slices.SortFunc(tasks, func(a, b framework.TaskRecord) int {
		if c := a.ScheduledFor.Compare(b.ScheduledFor); c != 0 {
			return c
		}
		return cmp.Compare(a.Sequence, b.Sequence)
	})
	if len(tasks) > limit {
		tasks, truncated = tasks[:limit], true
	}
	if len(broken) > limit {
		broken, truncated = broken[:limit], true
	}
	return tasks, broken, truncated, nil
}

// PauseForever is the pause [Operator.PauseQueue] sets when given a zero
// time: a hundred years, until [Operator.ResumeQueue].
const PauseForever = 100 * 365 * 24 * time.Hour

// PauseQueue pauses the consumer of queue (taskType, p) until until (zero:
// until [Operator.ResumeQueue]): no worker anywhere in the cluster gets its
// tasks, running tasks finish, and paused tasks spend no attempts. It is
// the operator's kill switch for one queue. It returns an error wrapping
// [framework.ErrNotFound] when no worker ever served the queue (it has no consumer).
//
// Circuit breakers pause the same consumers: a breaker that opens on a
// queue paused by hand shortens the pause to the breaker's own.
func (i *Operator) PauseQueue(ctx context.Context, taskType string, p framework.Priority, until time.Time) error {
	name, err := i.queueConsumer(taskType, p)
	if err != nil {
		return err
	}
	if until.IsZero() {
		until = time.Now().Add(PauseForever)
	}
	return i.pauseEverywhere(ctx, "pause", taskType, p, name, until)
}

// ResumeQueue resumes the consumer of queue (taskType, p), paused by hand or
// by a circuit breaker: deliveries restart about 100 ms later. Resuming a
// queue that is not paused pauses it for those 100 ms.
func (i *Operator) ResumeQueue(ctx context.Context, taskType string, p framework.Priority) error {
	name, err := i.queueConsumer(taskType, p)
	if err != nil {
		return err
	}
	// Clearing the pause (ResumeConsumer) does not wake the consumer's
	// delivery loop on nats-server 2.15: workers already waiting in a pull
	// get nothing until they renew it (up to 15 s later). The end of a
	// pause does wake it, so shorten the pause to a moment from now.
	return i.pauseEverywhere(ctx, "resume", taskType, p, name, time.Now().Add(resumeDelay))
}

// resumeDelay is how soon after [Operator.ResumeQueue] the queue's pause
// ends.
const resumeDelay = 100 * time.Millisecond

func (i *Operator) queueConsumer(taskType string, p framework.Priority) (string, error) {
	if err := streams.ValidateTaskType(taskType); err != nil {
		return "", fmt.Errorf("%w: %w", framework.ErrInvalidOption, err)
	}
	if !p.Valid() {
		return "", fmt.Errorf("%w: invalid priority %d", framework.ErrInvalidOption, p)
	}
	return i.names.ConsumerName(taskType, p), nil
}

func (i *Operator) queueErr(op, taskType string, p framework.Priority, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return fmt.Errorf("inspect: %s queue %s/%s: %w: no worker has served it", op, taskType, p, framework.ErrNotFound)
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return fmt.Errorf("inspect: %s queue %s/%s: %w: %w", op, taskType, p, framework.ErrTopologyMissing, err)
	}
	return fmt.Errorf("inspect: %s queue %s/%s: %w", op, taskType, p, err)
}

// BreakerRecords returns the latest state change of each dependency's
// circuit breaker that any worker reported to the breaker bucket, sorted by
// dependency. It is empty when no worker declared a dependency (the bucket
// does not exist). Keys that do not name a valid dependency
// (topology.ValidateDependency) and values that are not records are
// skipped. An open record whose Until has passed means the breaker
// lets probes through again; the next record tells how they went.
func (i *Operator) BreakerRecords(ctx context.Context) ([]breaker.Record, error) {
	kv, err := i.js.KeyValue(ctx, i.names.BreakerBucket())
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, nil
		}
		return nil, fmt.Errorf("inspect: breaker records: %w", err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("inspect: breaker records: %w", err)
	}
	var out []breaker.Record
	for k := range keys.Keys() {
		if topology.ValidateDependency(k) != nil {
			// Not a dependency's key: stored by another tool, and one that
			// nats.go refuses to read (a '@', a non-ASCII byte) would fail
			// the whole listing.
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
				continue
			}
			_ = keys.Stop()
			return nil, fmt.Errorf("inspect: breaker records: %s: %w", k, err)
		}
		var rec breaker.Record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			continue // not written by a worker; skip it
		}
		rec.Dependency = k
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b breaker.Record) int { return strings.Compare(a.Dependency, b.Dependency) })
	return out, nil
}
