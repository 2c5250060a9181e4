package framework

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Task partitions (streams.Config.Partitions, decision 046): a worker
// serves every partition of the deployment, read when it starts. Each
// (type, priority) has a consumer in each partition's stream (spread by
// type, decision 047: in partition 0 and the type's own), and the
// dispatcher ranks them all by priority alone, so a critical task of any
// partition starts before a low one of any other. A type's in-flight cap
// (WithMaxInFlight) is split across its partitions' consumers; the default
// cap, which no one chose, applies to each.

// discoverPartitions reads the partition layout of the deployment.
func (w *Worker) discoverPartitions(ctx context.Context) error {
	l, _, err := streams.DeployedLayout(ctx, w.js, w.names)
	if err != nil {
		return err
	}
	w.parts.Store(topology.NewPartitionSet(w.names, l))
	return nil
}

// layout returns the partition layout the worker serves: one partition
// before Start.
func (w *Worker) layout() streams.Layout { return w.parts.Load().Layout() }

// partitions returns the names of the partitions the worker serves: the
// base names alone before Start.
func (w *Worker) partitions() []streams.Names { return w.parts.Load().Names() }

// TaskStreams returns the task streams the worker serves, one per task
// partition (streams.Config.Partitions), read at [Worker.Start] and when
// partitions are added: the base task stream alone before Start. Plugins
// that act on a type's consumers (a breaker pausing them) act in each.
func (w *Worker) TaskStreams() []string { return w.parts.Load().Streams() }

// checkPartitionCount serves the task partitions added to the deployment
// (jetflow partitions add) since the worker started, at each stranded
// check: their consumers, dead-letter cores and fetchers, as at Start. It
// warns, once per count, when it cannot (their tasks wait, and it tries
// again at the next check).
func (w *Worker) checkPartitionCount(ctx context.Context) {
	l, _, err := streams.DeployedLayout(ctx, w.js, w.names)
	count, served := l.Partitions, len(w.partitions())
	if err != nil || count <= served {
		return
	}
	if err := w.growPartitions(ctx, l); err != nil {
		if w.warnedParts.Swap(int32(count)) != int32(count) {
			w.log.Warn("jetflow worker cannot serve the task partitions added to the deployment yet; their tasks wait",
				slog.Int("partitions", count), slog.Int("served", served), slog.Any(LogKeyError, err))
		}
		return
	}
	w.log.Info("jetflow worker serves the task partitions added to the deployment",
		slog.Int("partitions", count), slog.Int("were", served))
}

// growPartitions serves the partitions of l it does not serve yet: it
// ensures their consumers (the extensions' too), tells the extensions,
// then starts their fetchers, unless the worker is stopping. Spread by
// type, a type moves only to an added partition (streams.Layout.Serves),
// so the partitions served already need no new consumer.
func (w *Worker) growPartitions(ctx context.Context, l streams.Layout) error {
	added := w.names.Partitions(l.Partitions)[len(w.partitions()):]
	subs, err := w.ensureConsumersIn(ctx, added, l)
	if err != nil {
		return err
	}
	for i := range w.ext {
		if f := w.ext[i].consumers; f != nil {
			more, err := f(ctx, w, added)
			if err != nil {
				return fmt.Errorf("%s: %w", w.ext[i].Name, err)
			}
			subs = append(subs, more...)
		}
		if f := w.ext[i].grown; f != nil {
			if err := f(ctx, w, added); err != nil {
				return fmt.Errorf("%s: %w", w.ext[i].Name, err)
			}
		}
	}
	w.growMu.Lock()
	defer w.growMu.Unlock()
	select {
	case <-w.stopFetch:
		return nil // stopping: Shutdown waits for no further fetcher
	default:
	}
	w.parts.Store(topology.NewPartitionSet(w.names, l))
	for _, s := range subs {
		w.health.Loop(w.names.ConsumerName(s.tt.name, s.prio))
		w.fetchers.Add(1)
		go w.fetch(s)
	}
	return nil
}

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
