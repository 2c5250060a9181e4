package framework

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// WithPartitions makes the client spread its tasks over count task
// partitions (streams.Config.Partitions) without reading the layout from
// the server: for producers whose credentials may not read the task
// stream's configuration, or to keep a client on fewer partitions than the
// deployment has (its tasks are served either way). Ordered tasks are
// spread over count too: on a deployment that partitions were added to,
// give the count it had before (streams.Layout.Ordered, `jetflow
// partitions ls`), or keys would change partitions and lose their order. A
// count above the deployment's fails the enqueues that hash beyond it.
// Clients only. Default: the deployed layout, read at the first enqueue
// and every minute after.
func WithPartitions(count int) ClientOption {
	return WithPartitionLayout(streams.Layout{Partitions: count, Ordered: count})
}

// WithPartitionLayout is [WithPartitions] with the whole layout: the count
// ordered tasks are spread over (streams.Layout.Ordered, 0 for all), and
// what spreads the others (streams.Layout.By): give a deployment spread
// by type (streams.PartitionByType) its layout, or tasks would go to
// partitions that do not serve their type and wait there. Clients only.
func WithPartitionLayout(l streams.Layout) ClientOption {
	return clientOnly(func(o *options) error {
		if l.Ordered == 0 {
			l.Ordered = l.Partitions
		}
		err := streamdefs.ValidatePartitionCount(l.Partitions)
		if err == nil && (l.Ordered < 1 || l.Ordered > l.Partitions) {
			err = fmt.Errorf("%w: %d ordered of %d", streams.ErrPartitions, l.Ordered, l.Partitions)
		}
		if err == nil && l.By != "" && l.By != streams.PartitionByTask && l.By != streams.PartitionByType {
			err = fmt.Errorf("%w: partition by %q", streams.ErrPartitions, l.By)
		}
		if err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		o.partitions = &l
		return nil
	})
}

// partitionCount returns the layout the client spreads tasks over:
// WithPartitions, else the deployed layout, read at the first enqueue and
// again every partitionRefresh (partitions added to a live deployment are
// used within a minute; ordered tasks keep the partitions they had). While
// there is no deployment yet, the client enqueues on the first partition
// and reads again at most every partitionReread. When the layout cannot be
// read (a server that does not answer in time, credentials without the
// JetStream API, as the producers of package access have) it keeps what it
// had (the first partition at first, with a warning): give such producers
// WithPartitions.
func (c *Client) partitionCount(ctx context.Context) streams.Layout {
	if l := c.opts.partitions; l != nil {
		return *l
	}
	have := streams.Layout{Partitions: 1, Ordered: 1}
	if l := c.parts.Load(); l != nil {
		have = *l
	}
	now := time.Now().UnixNano()
	next := c.reread.Load()
	if now < next || c.gaveUp.Load() {
		return have
	}
	wait := partitionReread
	if c.parts.Load() != nil {
		wait = partitionRefresh
	}
	if !c.reread.CompareAndSwap(next, now+int64(wait)) {
		return have
	}
	rctx, cancel := context.WithTimeout(ctx, partitionLookup)
	l, found, err := streams.DeployedLayout(rctx, c.js, c.names)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		c.reread.Store(0)
		return have
	case err != nil && c.parts.Load() == nil:
		c.opts.logger.Warn("jetflow client cannot read the task partition count; enqueueing on the first partition (see framework.WithPartitions)",
			slog.Any(LogKeyError, err))
		c.gaveUp.Store(true)
		return have
	case err != nil || !found:
		return have
	}
	c.parts.Store(&l)
	return l
}

// partitionLookup bounds the client's read of the partition count,
// partitionReread spaces those reads while there is no deployment, and
// partitionRefresh once there is.
const (
	partitionLookup  = 2 * time.Second
	partitionReread  = 10 * time.Second
	partitionRefresh = time.Minute
)

// partitionFor returns the names of the partition of a task of taskType
// with ordering key key (every task of a key in one of the ordered
// partitions, where it keeps its order through added partitions), else of
// its type when l spreads by type, else of task ID id (a retried enqueue
// meets its first copy in the same stream's duplicate window); a task with
// none takes the next partition in turn.
func (c *Client) partitionFor(key, taskType, id string, l streams.Layout) streams.Names {
	switch {
	case key != "":
		return c.names.Partition(topology.PartitionOf(key, l.Ordered))
	case l.Partitions < 2:
		return c.names
	case l.ByType():
		return c.names.Partition(l.TypePartition(taskType))
	case id != "":
		return c.names.Partition(l.TaskPartition(id)) // after ByType: never -1
	}
	return c.names.Partition(int(c.spread.Add(1) % uint32(l.Partitions)))
}
