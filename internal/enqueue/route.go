package enqueue

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Task partitions (streams.Config.Partitions, decision 046) on the
// producer's side: which partition's stream and subjects a task goes to.

// Router chooses the task partition of a client's tasks. It is safe for
// concurrent use.
type Router struct {
	names      streams.Names
	taskStream string          // names.TaskStream(), built once
	fixed      *streams.Layout // framework.WithPartitions: never read
	log        *slog.Logger
	// read returns the deployed layout, and whether there is a deployment.
	read func(context.Context) (streams.Layout, bool, error)
	// parts is the deployment's layout once known, and spread the turn of
	// tasks with neither key nor ID.
	parts  atomic.Pointer[streams.Layout]
	spread atomic.Uint32
	reread atomic.Int64 // Unix nanoseconds before which not to read the layout again
	gaveUp atomic.Bool  // the layout could not be read: stay on the first partition
}

// NewRouter returns the router of a client on js with names. fixed, when
// not nil, is the layout to use without reading the deployment's
// (framework.WithPartitions); log gets the warning of a layout that
// cannot be read.
func NewRouter(js jetstream.JetStream, names streams.Names, fixed *streams.Layout, log *slog.Logger) *Router {
	return &Router{names: names, taskStream: names.TaskStream(), fixed: fixed, log: log,
		read: func(ctx context.Context) (streams.Layout, bool, error) { return streams.DeployedLayout(ctx, js, names) }}
}

// layoutLookup bounds the router's read of the layout, layoutReread spaces
// those reads while there is no deployment, and layoutRefresh once there
// is.
const (
	layoutLookup  = 2 * time.Second
	layoutReread  = 10 * time.Second
	layoutRefresh = time.Minute
)

// Layout returns the layout the client spreads tasks over: the fixed one,
// else the deployed layout, read at the first enqueue and again every
// minute (partitions added to a live deployment are used within a minute;
// ordered tasks keep the partitions they had). While there is no
// deployment yet, it returns the first partition alone and reads again at
// most every 10 seconds. When the layout cannot be read (a server that
// does not answer in time, credentials without the JetStream API) it keeps
// what it had (the first partition at first, with a warning, and it stops
// trying): give such producers framework.WithPartitions. A read cut short
// by ctx is tried again at the next call.
func (r *Router) Layout(ctx context.Context) streams.Layout {
	if r.fixed != nil {
		return *r.fixed
	}
	have := streams.Layout{Partitions: 1, Ordered: 1}
	if l := r.parts.Load(); l != nil {
		have = *l
	}
	now := time.Now().UnixNano()
	next := r.reread.Load()
	if now < next || r.gaveUp.Load() {
		return have
	}
	wait := layoutReread
	if r.parts.Load() != nil {
		wait = layoutRefresh
	}
	if !r.reread.CompareAndSwap(next, now+int64(wait)) {
		return have
	}
	rctx, cancel := context.WithTimeout(ctx, layoutLookup)
	l, found, err := r.read(rctx)
	cancel()
	switch {
	case err != nil && ctx.Err() != nil:
		r.reread.Store(0)
		return have
	case err != nil && r.parts.Load() == nil:
		r.log.Warn("jetflow client cannot read the task partition count; enqueueing on the first partition (see framework.WithPartitions)",
			slog.Any("error", err))
		r.gaveUp.Store(true)
		return have
	case err != nil || !found:
		return have
	}
	r.parts.Store(&l)
	return l
}

// Partition returns the names of the partition of a task of taskType
// with ordering key key (every task of a key in one of the ordered
// partitions, where it keeps its order through added partitions), else of
// its type when l spreads by type, else of task ID id (a retried enqueue
// meets its first copy in the same stream's duplicate window); a task with
// none takes the next partition in turn.
func (r *Router) Partition(key, taskType, id string, l streams.Layout) streams.Names {
	switch {
	case key != "":
		return r.names.Partition(topology.PartitionOf(key, l.Ordered))
	case l.Partitions < 2:
		return r.names
	case l.ByType():
		return r.names.Partition(l.TypePartition(taskType))
	case id != "":
		return r.names.Partition(l.TaskPartition(id)) // after ByType: never -1
	}
	return r.names.Partition(int(r.spread.Add(1) % uint32(l.Partitions)))
}

// Stream returns the stream that stores msg, a message [Builder.Build] built with
// r: the delay stream for a delayed task, else the task stream of its
// subject's partition.
func (r *Router) Stream(msg *nats.Msg) string {
	if msg.Header.Get(taskmsg.HeaderScheduleTarget) != "" {
		return r.names.DelayStream()
	}
	if k := r.names.SubjectPartition(msg.Subject); k > 0 {
		return r.names.Partition(k).TaskStream()
	}
	return r.taskStream
}

// TaskID returns id, or for a task built without an ID ([Built].ID "")
// the ID the worker derives from its stream sequence seq.
func TaskID(id string, seq uint64) string {
	if id != "" {
		return id
	}
	return taskmsg.SeqID(seq)
}
