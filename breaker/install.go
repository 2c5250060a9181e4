package breaker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/circuit"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/streams"
)

// Record is the value stored under a dependency's key in the breaker
// bucket ([streams.Names.BreakerBucket], "JETFLOW_BREAKERS" by default)
// each time a worker's breaker changes state. The latest record is the
// latest change any worker saw; read it with
// `nats kv get JETFLOW_BREAKERS <dependency>`.
type Record struct {
	// Dependency is the dependency's name (also the key).
	Dependency string `json:"dependency"`
	// State is the state the breaker entered.
	State State `json:"state"`
	// Since is when it entered it.
	Since time.Time `json:"since"`
	// Until is, for an open breaker, when it lets probes through again and
	// when the paused consumers resume.
	Until time.Time `json:"until,omitzero"`
	// Worker identifies the reporting worker process.
	Worker string `json:"worker"`
	// Failures is the number of failures counted when the breaker opened.
	Failures uint32 `json:"failures,omitzero"`
	// TaskTypes are the reporting worker's task types that declared the
	// dependency ([WithDependencies]).
	TaskTypes []string `json:"task_types,omitempty"`
	// Consumers are the consumers the reporting worker paused until Until.
	Consumers []string `json:"consumers,omitempty"`
}

// pluginName is the name breakers are installed under on a worker.
const pluginName = "breakers"

// installed wires a worker's breakers to the cluster ([circuit.Cluster])
// and holds tasks refused by an open breaker.
type installed struct {
	reg     *Registry
	cluster *circuit.Cluster
	joined  bool // set by prepare: the cluster's bucket is bound
}

// Install gives w circuit breakers, configured by [WithSettings],
// [WithLogger] (default: the worker's) and [WithStateChanged], and returns
// its registry. Call it before [framework.Worker.Start], once per worker.
// Inside w's handlers, [Call] uses the registry; a task whose handler
// returns an [ErrOpen] is held in the worker and rerun after the open
// period without spending an attempt. At Start, if a task type declared a
// dependency ([WithDependencies]) or a breaker was declared, the worker
// joins the breaker bucket: a breaker that opens pauses the consumers of
// the types that declared its dependency, in every worker, until it lets
// probes through. A report from another worker pauses this worker's
// consumers for at most this worker's own open timeout, and opens breakers
// of at most 256 dependencies this worker neither declared nor used (the
// reports are records of the breaker bucket, which anyone allowed to write
// it fills). Every hook set of w ([framework.WithHooks],
// [framework.Worker.AddHooks]) hears state changes through its Event
// field, as a [StateChange].
//
// A worker without Install has no breakers: [Call] in its handlers returns
// [ErrNoRegistry], and a type registered with [WithDependencies] fails
// the worker's Start.
func Install(w *framework.Worker, opts ...Option) (*Registry, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.log == nil {
		c.log = w.Logger()
	}
	own := c.hook
	c.hook = func(ctx context.Context, dep string, from, to State) {
		w.Emit(ctx, StateChange{Dependency: dep, From: from, To: to})
		if own != nil {
			own(ctx, dep, from, to)
		}
	}
	x := &installed{reg: newRegistry(c)}
	names := w.Names()
	x.cluster = &circuit.Cluster{
		ID: nuid.Next(), JS: w.JetStream(), Stream: names.TaskStream(), Streams: w.TaskStreams, // every task partition
		Consumers: func(taskType string) []string {
			out := make([]string, 0, len(streams.Priorities))
			for _, p := range streams.Priorities {
				out = append(out, names.ConsumerName(taskType, p))
			}
			return out
		},
		OpenTimeout: func(dep string) (time.Duration, error) {
			b, err := x.reg.getRemote(dep)
			if err != nil {
				return 0, err
			}
			return b.settings.OpenTimeout, nil
		},
		ForceOpen: func(dep string) {
			if b, err := x.reg.getRemote(dep); err == nil {
				b.forceOpen()
			}
		},
		Log: c.log, LogKeyDep: framework.LogKeyDependency, LogKeyErr: framework.LogKeyError,
	}
	x.reg.notify = x.cluster.Notify
	w.Use(framework.Plugin{
		Name:    pluginName,
		Value:   x.reg,
		Keys:    []any{depsKey{}},
		Prepare: x.prepare,
		Service: func(ctx context.Context, _ *framework.Worker) {
			if x.joined {
				x.cluster.Run(ctx)
			}
		},
		Hold: func(_ *framework.Task, err error) (time.Duration, bool) {
			var oe *OpenError
			if !errors.As(err, &oe) {
				return 0, false
			}
			return circuit.HoldFor(oe.Until), true
		},
	})
	return x.reg, nil
}

// Of returns the registry of the breakers installed on w ([Install]), or
// nil without them (or for a nil w). Its States method is the breakers'
// dashboard.
func Of(w *framework.Worker) *Registry {
	if w == nil {
		return nil
	}
	v, _ := w.Plugin(pluginName)
	r, _ := v.(*Registry)
	return r
}

// prepare reads the dependencies the task types declared and, when there
// is any (or a declared breaker), joins the cluster's breaker bucket.
func (x *installed) prepare(ctx context.Context, w *framework.Worker) error {
	types := make(map[string][]string)
	for _, typ := range w.Types() {
		for _, v := range w.HandlerValues(typ, depsKey{}) {
			for _, d := range v.([]string) {
				if slices.Contains(types[d], typ) {
					continue
				}
				types[d] = append(types[d], typ)
				if _, err := x.reg.get(d); err != nil {
					return err
				}
			}
		}
	}
	if len(types) == 0 && len(x.reg.declared) == 0 {
		return nil // breakers stay local to this worker
	}
	kv, err := ensureBucket(ctx, w.JetStream(), w.Names())
	if err != nil {
		return err
	}
	x.cluster.KV, x.cluster.Types, x.joined = kv, types, true
	return nil
}

// ensureBucket binds the breaker bucket, creating it with the task
// stream's storage and replica count when missing.
func ensureBucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	bucket := names.BreakerBucket()
	err := jsapi.EnsureBucket(ctx, js, jsapi.TaskStreamBucket(ctx, js, names.TaskStream(), jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "jetflow circuit breakers: latest state change per dependency",
		History:     8,
	}), false)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("breaker bucket %s: %w", bucket, err)
	}
	return kv, nil
}
