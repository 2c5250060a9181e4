package inspect

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/queuestate"
	"github.com/jetflow-io/jetflow/streams"
)

// PartitionStat is the load of one task partition (streams.Config.Partitions):
// its stream, the server leading it, and the tasks waiting and in flight on
// its consumers.
type PartitionStat struct {
	Partition int
	Stream    string
	// Leader is the server leading the stream, "" on a single server.
	Leader   string
	Pending  int
	InFlight int
}

// addPartitions adds the queues of task partitions 1 and up to snap, and
// returns the load of every partition, partition 0 (stream, first) included.
func addPartitions[K comparable](ctx context.Context, i *Operator, stream jetstream.Stream, snap *queuestate.Snapshot[K],
	queueOf func(*jetstream.ConsumerInfo) (K, bool)) ([]PartitionStat, error) {
	l, _, err := streams.DeployedLayout(ctx, i.js, i.names)
	count := l.Partitions
	if err != nil {
		return nil, err
	}
	var first PartitionStat
	for _, q := range snap.Queues {
		first.Pending += q.Pending
		first.InFlight += q.InFlight
	}
	first.Stream, first.Leader = i.names.TaskStream(), leaderOf(stream)
	out := []PartitionStat{first}
	for _, p := range i.names.Partitions(count)[1:] {
		s, err := i.js.Stream(ctx, p.TaskStream())
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", p.PartitionIndex(), err)
		}
		ps := PartitionStat{Partition: p.PartitionIndex(), Stream: p.TaskStream(), Leader: leaderOf(s)}
		lister := s.ListConsumers(ctx)
		for ci := range lister.Info() {
			k, ok := queueOf(ci)
			if !ok {
				continue
			}
			q := snap.Queues[k]
			if q == nil {
				q = &queuestate.Load{}
				snap.Queues[k] = q
			}
			q.Pending += int(ci.NumPending)
			q.InFlight += ci.NumAckPending
			q.Redelivered += ci.NumRedelivered
			q.Paused = q.Paused || ci.Paused
			ps.Pending += int(ci.NumPending)
			ps.InFlight += ci.NumAckPending
		}
		if err := lister.Err(); err != nil {
			return nil, fmt.Errorf("partition %d: list consumers: %w", p.PartitionIndex(), err)
		}
		out = append(out, ps)
	}
	return out, nil
}

// leaderOf returns the server leading stream, from its cached info.
func leaderOf(stream jetstream.Stream) string {
	if ci := stream.CachedInfo().Cluster; ci != nil {
		return ci.Leader
	}
	return ""
}

// pauseEverywhere pauses the consumer name of queue (taskType, p) until
// until in every task partition's stream: a queue paused in one partition
// would go on running in the others. The first partition's error, or a
// later one's other than a missing consumer, is returned.
func (i *Operator) pauseEverywhere(ctx context.Context, op, taskType string, p framework.Priority, name string, until time.Time) error {
	l, _, err := streams.DeployedLayout(ctx, i.js, i.names)
	count := l.Partitions
	if err != nil {
		return i.queueErr(op, taskType, p, err)
	}
	for _, part := range i.names.Partitions(count) {
		_, err := i.js.PauseConsumer(ctx, part.TaskStream(), name, until)
		if err != nil && (part.PartitionIndex() == 0 || !errors.Is(err, jetstream.ErrConsumerNotFound)) {
			return i.queueErr(op, taskType, p, err)
		}
	}
	return nil
}

// partitionActivities adds to acts, the activity of the first task
// stream's queue consumers, that of the same consumers in the other task
// partitions: counts add up, the oldest waiting task is the oldest of any,
// the last delivery the latest, and a queue is paused while any partition
// is.
func (i *Operator) partitionActivities(ctx context.Context, acts []queuestate.Activity, isQueue func(string) bool) ([]queuestate.Activity, error) {
	l, _, err := streams.DeployedLayout(ctx, i.js, i.names)
	count := l.Partitions
	if err != nil || count < 2 {
		return acts, err
	}
	byName := make(map[string]int, len(acts))
	for k, a := range acts {
		byName[a.Consumer] = k
	}
	for _, p := range i.names.Partitions(count)[1:] {
		s, err := i.js.Stream(ctx, p.TaskStream())
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", p.PartitionIndex(), err)
		}
		more, err := queuestate.Activities(ctx, i.nc, s, p.TaskStream(), func(filter string) bool {
			return isQueue(filter) && p.SubjectPartition(filter) == p.PartitionIndex()
		})
		if err != nil {
			return nil, fmt.Errorf("partition %d: %w", p.PartitionIndex(), err)
		}
		for _, m := range more {
			k, ok := byName[m.Consumer]
			if !ok {
				byName[m.Consumer] = len(acts)
				acts = append(acts, m)
				continue
			}
			a := &acts[k]
			a.Delivered += m.Delivered
			a.Acked += m.Acked
			a.Waiting += m.Waiting
			a.InFlight += m.InFlight
			a.Pulling += m.Pulling
			if !m.OldestWaiting.IsZero() && (a.OldestWaiting.IsZero() || m.OldestWaiting.Before(a.OldestWaiting)) {
				a.OldestWaiting = m.OldestWaiting
			}
			if m.LastDelivery.After(a.LastDelivery) {
				a.LastDelivery = m.LastDelivery
			}
			if m.Paused && !a.Paused {
				a.Paused, a.PausedUntil = true, m.PausedUntil
			}
		}
	}
	return acts, nil
}
