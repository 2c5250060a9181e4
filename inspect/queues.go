package inspect

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/queuestate"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/nats-io/nats.go/jetstream"
)

// MaxJunkSubjects bounds [QueueStats].JunkSubjects.
const MaxJunkSubjects = 100

// QueueStat is the load of one (task type, priority) queue.
type QueueStat struct {
	Type     string
	Priority framework.Priority
	// Pending counts tasks waiting on the work subject, not yet delivered.
	Pending int
	// InFlight counts delivered tasks not yet acknowledged: running, or
	// waiting for a retry after a failed attempt.
	InFlight int
	// Redelivered counts in-flight tasks delivered more than once.
	Redelivered int
	// Scheduled counts delayed tasks of the queue waiting in schedules.
	Scheduled int
	// Paused is true while the queue's consumer is paused (for example by
	// an open circuit breaker), until PausedUntil.
	Paused      bool
	PausedUntil time.Time
}

// QueueStats is a snapshot of every queue.
type QueueStats struct {
	// Queues lists the (type, priority) pairs that have a consumer or
	// scheduled tasks, sorted by type then priority (highest first).
	Queues []QueueStat
	// Dead counts dead letters per task type. Records on subjects that
	// name no valid task type (stored there by another tool) are not
	// counted.
	Dead map[string]uint64
	// Scheduled counts all delayed tasks; Cron counts repeating schedules.
	// Neither counts a broken one.
	Scheduled int
	Cron      int
	// BrokenScheduled counts the subjects of delayed tasks, and BrokenCron
	// those of repeating schedules, whose last message is not a schedule
	// jetflow wrote: a message stored after a schedule (a server's reply
	// sent there by a producer who chose the reply subject, for example)
	// makes the server drop it, and it never fires. A broken repeating
	// schedule is restored by registering it again (package schedule, which
	// lists it with the reason); a broken delayed task cannot be restored,
	// its ID is in the subject ([Operator.ListTasks] lists it).
	BrokenScheduled int
	BrokenCron      int
	// ScheduledTruncated is true when there were more delayed tasks than
	// [MaxScheduledScan]: Scheduled is exact, per-queue counts are not.
	ScheduledTruncated bool
	// Junk counts messages on schedule or cron subjects that are not
	// schedules (published there by another tool, without a Nats-Schedule
	// header): they never fire and are not counted in Scheduled or Cron.
	// JunkSubjects names up to [MaxJunkSubjects] of their subjects.
	Junk         int
	JunkSubjects []string
	// Queues without a consumer that have delayed tasks, and types with
	// dead letters, are named by whoever published those: at most
	// [MaxUnservedQueues] of each are listed (the dead-letter types with
	// most records). UnlistedScheduled and UnlistedDead count the delayed
	// tasks and dead letters of the others.
	UnlistedScheduled int
	UnlistedDead      uint64
	// Partitions is the load of each task partition, in order (one on a
	// deployment without partitions); Queues adds them up.
	Partitions []PartitionStat
	// Taken is when the snapshot was taken.
	Taken time.Time
}

// MaxScheduledScan bounds how many delayed tasks [Operator.QueueStats]
// reads to count them per queue.
const MaxScheduledScan = 100_000

// MaxUnservedQueues bounds the queues that [Operator.QueueStats] lists
// without a consumer (known from their delayed tasks only), and the task
// types it lists dead letters of: each becomes table rows and metric
// series.
const MaxUnservedQueues = 1000

// QueueStats returns the load of every queue: pending and in-flight counts
// from the consumers (one paged request), delayed tasks per queue (read
// with batched direct gets, a thousand per round trip, because the schedule
// subject does not carry the task type), repeating schedules, and dead
// letters per type (one stream info request).
func (i *Operator) QueueStats(ctx context.Context) (*QueueStats, error) {
	taken := time.Now()
	stream, err := i.js.Stream(ctx, i.names.TaskStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("inspect: queue stats: %w: %w", framework.ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("inspect: queue stats: %w", err)
	}
	type queue struct {
		typ  string
		prio framework.Priority
	}
	queueOf := func(ci *jetstream.ConsumerInfo) (queue, bool) {
		typ := ci.Config.Metadata[topology.MetaTaskType]
		p, err := streams.ParsePriority(ci.Config.Metadata[topology.MetaPriority])
		if streams.ValidateTaskType(typ) != nil || err != nil {
			// Not a jetflow queue consumer (or metadata another tool
			// wrote); derive from its filter if possible.
			if p, typ, err = i.names.ParseTaskSubject(ci.Config.FilterSubject); err != nil {
				return queue{}, false
			}
		}
		return queue{typ, p}, true
	}
	snap, err := queuestate.Stats(ctx, i.nc, i.js, stream, queuestate.StatsConfig[queue]{
		TaskStream: i.names.TaskStream(), ScheduleStream: i.names.ScheduleStream(), DLQStream: i.names.DLQStream(),
		Schedules: i.names.ScheduleSubject(">"), Crons: i.names.CronSubject(">"), DLQPrefix: i.names.DLQSubject(""),
		DelayStream: i.names.DelayStream(), Delays: i.names.DelaySubject(">"),
		MaxScheduled: MaxScheduledScan, MaxJunk: MaxJunkSubjects, MaxQueues: MaxUnservedQueues,
		QueueOf: queueOf,
		TargetOf: func(subject string) (queue, bool) {
			p, typ, err := i.names.ParseScheduleTarget(subject)
			return queue{typ, p}, err == nil
		},
	})
	if err != nil {
		return nil, fmt.Errorf("inspect: queue stats: %w", err)
	}
	// The queues of every task partition add up (partitions.go).
	parts, err := addPartitions(ctx, i, stream, snap, queueOf)
	if err != nil {
		return nil, fmt.Errorf("inspect: queue stats: %w", err)
	}
	// Any publisher on the dead-letter subjects chooses the type token;
	// these types become metric labels and table rows.
	maps.DeleteFunc(snap.Dead, func(typ string, _ uint64) bool { return streams.ValidateTaskType(typ) != nil })
	out := &QueueStats{Dead: snap.Dead, Scheduled: snap.Scheduled, Cron: snap.Cron, ScheduledTruncated: snap.Truncated,
		Junk: snap.Junk, JunkSubjects: snap.JunkSubjects, UnlistedScheduled: snap.UnlistedScheduled, Taken: taken,
		BrokenScheduled: snap.BrokenScheduled, BrokenCron: snap.BrokenCron, Partitions: parts}
	if len(out.Dead) > MaxUnservedQueues {
		types := slices.Collect(maps.Keys(out.Dead))
		slices.SortFunc(types, func(a, b string) int {
			if c := cmp.Compare(out.Dead[b], out.Dead[a]); c != 0 {
				return c
			}
			return strings.Compare(a, b)
		})
		for _, typ := range types[MaxUnservedQueues:] {
			out.UnlistedDead += out.Dead[typ]
			delete(out.Dead, typ)
		}
	}
	for k, q := range snap.Queues {
		out.Queues = append(out.Queues, QueueStat{Type: k.typ, Priority: k.prio, Pending: q.Pending, InFlight: q.InFlight,
			Redelivered: q.Redelivered, Scheduled: q.Scheduled, Paused: q.Paused, PausedUntil: q.PausedUntil})
	}
	slices.SortFunc(out.Queues, func(a, b QueueStat) int {
		if c := strings.Compare(a.Type, b.Type); c != 0 {
			return c
		}
		return a.Priority.Rank() - b.Priority.Rank()
	})
	return out, nil
}

// StrandedSubject is a work subject holding tasks that no consumer of the
// task stream reads: a type no worker ever registered (or registered at
// another priority), or a subject jetflow's client would refuse (an
// upper-case type, for example) published by another tool. Such tasks never
// run and never fail: they wait until a worker serves the subject or an
// operator removes them.
type StrandedSubject struct {
	// Subject is the work subject, "<prefix>.task.<priority>.<type>".
	Subject string
	// Tasks is how many tasks wait on it.
	Tasks uint64
	// Oldest is when the oldest of them was stored; Age is how long ago,
	// when the report was made.
	Oldest time.Time
	Age    time.Duration
}

// MaxStrandedSubjects bounds how many subjects [Operator.Stranded] reports.
const MaxStrandedSubjects = 1000

// Stranded reports the work subjects of the task stream, the slot subjects
// of ordered tasks included, that hold tasks but match no consumer's
// filter, oldest first, at most [MaxStrandedSubjects]. A subject whose
// consumer exists but has no running worker is not stranded:
// [Operator.QueueStats] counts its tasks as pending. Cost: two stream info requests, one consumer listing, and one
// direct get per stranded subject.
func (i *Operator) Stranded(ctx context.Context) ([]StrandedSubject, error) {
	stream, err := i.js.Stream(ctx, i.names.TaskStream())
	if err != nil {
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("inspect: stranded tasks: %w: %w", framework.ErrTopologyMissing, err)
		}
		return nil, fmt.Errorf("inspect: stranded tasks: %w", err)
	}
	subs, err := queuestate.Stranded(ctx, i.nc, stream, i.names.TaskStream(),
		[]string{i.names.TaskWildcard(), i.names.OrderedWildcard()}, MaxStrandedSubjects)
	if err != nil {
		return nil, fmt.Errorf("inspect: stranded tasks: %w", err)
	}
	var out []StrandedSubject
	for _, s := range subs {
		out = append(out, StrandedSubject(s))
	}
	return out, nil
}
