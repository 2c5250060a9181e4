package intake

import (
	"context"
	"log/slog"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Task partitions (streams.Config.Partitions, decision 046): a worker
// serves every partition of the deployment, read when it starts and again
// at each of the worker's checks (CheckPartitions). Each (type, priority)
// has a consumer in each partition's stream (spread by type, decision 047:
// in partition 0 and the type's own), and the scheduler ranks them all by
// priority alone, so a critical task of any partition starts before a low
// one of any other. A type's in-flight cap (Spec.CapSet) is split across
// its partitions' consumers; the default cap, which no one chose, applies
// to each.

// Discover reads the partition layout of the deployment.
func (s *Stage[T, X]) Discover(ctx context.Context) error {
	l, _, err := streams.DeployedLayout(ctx, s.cfg.JS, s.cfg.Names)
	if err != nil {
		return err
	}
	s.parts.Store(topology.NewPartitionSet(s.cfg.Names, l))
	return nil
}

// Partitions returns the task partitions the stage serves: the base one
// alone before Discover.
func (s *Stage[T, X]) Partitions() *topology.PartitionSet { return s.parts.Load() }

// CheckPartitions serves the task partitions added to the deployment
// (jetflow partitions add) since the worker started: their consumers
// (Config.Grown's too) and fetchers, as at the start. It warns, once per
// count, when it cannot (their tasks wait, and the next check tries
// again).
func (s *Stage[T, X]) CheckPartitions(ctx context.Context) {
	l, _, err := streams.DeployedLayout(ctx, s.cfg.JS, s.cfg.Names)
	count, served := l.Partitions, len(s.Partitions().Names())
	if err != nil || count <= served {
		return
	}
	if err := s.grow(ctx, l); err != nil {
		if s.warnedParts.Swap(int32(count)) != int32(count) {
			s.cfg.Log.Warn("jetflow worker cannot serve the task partitions added to the deployment yet; their tasks wait",
				slog.Int("partitions", count), slog.Int("served", served), slog.Any(logKeyError, err))
		}
		return
	}
	s.cfg.Log.Info("jetflow worker serves the task partitions added to the deployment",
		slog.Int("partitions", count), slog.Int("were", served))
}

// grow serves the partitions of l it does not serve yet: it ensures their
// consumers (Config.Grown's too), then pulls them, unless the stage
// stopped. Spread by type, a type moves only to an added partition
// (streams.Layout.Serves), so the partitions served already need no new
// consumer.
func (s *Stage[T, X]) grow(ctx context.Context, l streams.Layout) error {
	added := s.cfg.Names.Partitions(l.Partitions)[len(s.Partitions().Names()):]
	srcs, err := s.ensureIn(ctx, added, l)
	if err != nil {
		return err
	}
	more, err := s.cfg.Grown(ctx, added)
	if err != nil {
		return err
	}
	s.growMu.Lock()
	defer s.growMu.Unlock()
	select {
	case <-s.stop:
		return nil // stopping: Drain waits for no further fetcher
	default:
	}
	s.parts.Store(topology.NewPartitionSet(s.cfg.Names, l))
	s.Pull(append(srcs, more...))
	return nil
}
