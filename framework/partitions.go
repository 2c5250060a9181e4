package framework

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/streams"
)

// Task partitions (streams.Config.Partitions, decision 046): a worker
// serves every partition of the deployment, read when it starts. Each
// (type, priority) has a consumer in each partition's stream, and the
// dispatcher ranks them all by priority alone, so a critical task of any
// partition starts before a low one of any other. A type's in-flight cap
// (WithMaxInFlight) is split across its partitions' consumers; the default
// cap, which no one chose, applies to each.

// discoverPartitions reads the partition count of the deployment.
func (w *Worker) discoverPartitions(ctx context.Context) error {
	count, _, err := streams.DeployedPartitions(ctx, w.js, w.names)
	if err != nil {
		return err
	}
	w.parts = w.names.Partitions(count)
	w.partStreams = make([]string, len(w.parts))
	for k, p := range w.parts {
		w.partStreams[k] = p.TaskStream()
	}
	return nil
}

// partitions returns the names of the partitions the worker serves: the
// base names alone before Start.
func (w *Worker) partitions() []streams.Names {
	if len(w.parts) == 0 {
		return []streams.Names{w.names}
	}
	return w.parts
}

// TaskStreams returns the task streams the worker serves, one per task
// partition (streams.Config.Partitions), read at [Worker.Start]: the base
// task stream alone before. Plugins that act on a type's consumers (a
// breaker pausing them) act in each.
func (w *Worker) TaskStreams() []string {
	if len(w.partStreams) == 0 {
		return []string{w.taskStream}
	}
	return w.partStreams
}

// checkPartitionCount warns, once per count, when the deployment has more
// task partitions than the worker serves: partitions added (jetflow
// partitions add) after it started, whose tasks wait until it restarts.
func (w *Worker) checkPartitionCount(ctx context.Context) {
	count, _, err := streams.DeployedPartitions(ctx, w.js, w.names)
	if err != nil || count <= len(w.partitions()) || w.warnedParts.Swap(int32(count)) == int32(count) {
		return
	}
	w.log.Warn("jetflow deployment has more task partitions than this worker serves: restart it to serve them (their tasks wait)",
		slog.Int("partitions", count), slog.Int("served", len(w.partitions())))
}

// streamOf returns the task stream of a message stored on subject.
func (w *Worker) streamOf(subject string) string {
	if len(w.partStreams) < 2 {
		return w.taskStream
	}
	if k := w.names.SubjectPartition(subject); k < len(w.partStreams) {
		return w.partStreams[k]
	}
	return w.taskStream
}

// partitionCap returns partition k's share of a cap of total across count
// partitions: the shares add up to total, and none is below 1. A cap of 0
// or less (none) stays as it is.
func partitionCap(total, count, k int) int {
	if total <= 0 || count < 2 {
		return total
	}
	share := total / count
	if k < total%count {
		share++
	}
	return max(share, 1)
}

// WithPartitions makes the client spread its tasks over count task
// partitions (streams.Config.Partitions) without reading the count from
// the server: for producers whose credentials may not read the task
// stream's configuration, or to keep a client on fewer partitions than
// the deployment has (its tasks are served either way). A count above the
// deployment's fails the enqueues that hash beyond it. Clients only.
// Default: the deployed count, read once by the first enqueue.
func WithPartitions(count int) ClientOption {
	return clientOnly(func(o *options) error {
		if err := streams.ValidatePartitionCount(count); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		o.partitions = count
		return nil
	})
}

// partitionCount returns the task partition count the client spreads
// over: WithPartitions, else the deployed count, read once. While there is
// no deployment yet, the client enqueues on the first partition and reads
// again at most every partitionReread. When the count cannot be read (a
// server that does not answer in time, credentials without the JetStream
// API, as the producers of package access have) it stays on the first
// partition, where workers serve its tasks too, and warns once: give such
// producers WithPartitions.
func (c *Client) partitionCount(ctx context.Context) int {
	if c.opts.partitions > 0 {
		return c.opts.partitions
	}
	if n := c.parts.Load(); n > 0 {
		return int(n)
	}
	now := time.Now().UnixNano()
	next := c.reread.Load()
	if now < next || !c.reread.CompareAndSwap(next, now+int64(partitionReread)) {
		return 1
	}
	rctx, cancel := context.WithTimeout(ctx, partitionLookup)
	count, found, err := streams.DeployedPartitions(rctx, c.js, c.names)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		c.reread.Store(0)
		return 1
	case err != nil:
		c.opts.logger.Warn("jetflow client cannot read the task partition count; enqueueing on the first partition (see framework.WithPartitions)",
			slog.Any(LogKeyError, err))
		c.parts.Store(1)
		return 1
	case !found:
		return 1
	}
	c.parts.Store(int32(count))
	return count
}

// partitionLookup bounds the client's read of the partition count, and
// partitionReread spaces those reads while there is no deployment.
const (
	partitionLookup = 2 * time.Second
	partitionReread = 10 * time.Second
)

// partitionFor returns the names of the partition of a task with ordering
// key key (every task of a key in one partition, where it keeps its
// order) or else task ID id (a retried enqueue meets its first copy in the
// same stream's duplicate window); a task with neither takes the next
// partition in turn.
func (c *Client) partitionFor(key, id string, partitions int) streams.Names {
	switch {
	case partitions < 2:
		return c.names
	case key != "":
		return c.names.Partition(streams.PartitionOf(key, partitions))
	case id != "":
		return c.names.Partition(streams.PartitionOf(id, partitions))
	}
	return c.names.Partition(int(c.spread.Add(1) % uint32(partitions)))
}
