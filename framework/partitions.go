package framework

import (
	"fmt"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
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
