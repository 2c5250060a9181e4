package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/internal/circuit"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/streams"
)

// BreakerRecord is the value stored under a dependency's key in the breaker
// bucket ([streams.Names.BreakerBucket], "JETFLOW_BREAKERS" by default)
// each time a worker's breaker changes state. The latest record is the
// latest change any worker saw; read it with
// `nats kv get JETFLOW_BREAKERS <dependency>`.
type BreakerRecord struct {
	// Dependency is the dependency's name (also the key).
	Dependency string `json:"dependency"`
	// State is the state the breaker entered.
	State BreakerState `json:"state"`
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

// breakerExt wires a worker's breakers to the cluster
// ([circuit.Cluster]) and holds tasks refused by an open breaker.
type breakerExt struct {
	reg     *Breakers
	cluster *circuit.Cluster
	joined  bool // set by prepare: the cluster's bucket is bound
}

// installBreakers gives w its breaker registry and extension.
func (w *Worker) installBreakers() {
	x := &breakerExt{reg: newBreakers(w.opts)}
	x.cluster = &circuit.Cluster{
		ID: nuid.Next(), JS: w.js, Stream: w.names.TaskStream(),
		Consumers: func(taskType string) []string {
			out := make([]string, 0, len(streams.Priorities))
			for _, p := range streams.Priorities {
				out = append(out, w.names.ConsumerName(taskType, p))
			}
			return out
		},
		ForceOpen: func(dep string) error {
			b, err := x.reg.get(dep)
			if err == nil {
				b.forceOpen()
			}
			return err
		},
		Log: w.log, LogKeyDep: LogKeyDependency, LogKeyErr: LogKeyError,
	}
	x.reg.notify = x.cluster.Notify
	// Every hook set of the worker hears breaker changes, those added with
	// AddHooks included, not only the WithHooks one.
	x.reg.hook = func(ctx context.Context, dep string, from, to BreakerState) {
		for i := range w.hooks {
			if h := w.hooks[i].BreakerStateChanged; h != nil {
				callHook(w.log, &w.stats.hookPanics, "BreakerStateChanged", func() { h(ctx, dep, from, to) })
			}
		}
	}
	w.breakers = x
	w.addExtension(extension{
		name:    "breakers",
		prepare: x.prepare,
		service: func(ctx context.Context, _ *Worker) {
			if x.joined {
				x.cluster.Run(ctx)
			}
		},
		hold: func(_ *Task, err error) (time.Duration, bool) {
			var boe *BreakerOpenError
			if !errors.As(err, &boe) {
				return 0, false
			}
			return circuit.HoldFor(boe.Until), true
		},
	})
}

// Breakers returns the worker's circuit breaker registry, used by [Call]
// inside its handlers. Its States method is the breakers' dashboard.
func (w *Worker) Breakers() *Breakers { return w.breakers.reg }

// prepare reads the dependencies the task types declared and, when there
// is any (or a declared breaker), joins the cluster's breaker bucket.
func (x *breakerExt) prepare(ctx context.Context, w *Worker) error {
	types := make(map[string][]string)
	for _, tt := range w.order {
		for _, d := range tt.cfg.dependencies {
			types[d] = append(types[d], tt.name)
			if _, err := x.reg.get(d); err != nil {
				return err
			}
		}
	}
	if len(types) == 0 && len(w.opts.breakers) == 0 {
		return nil // breakers stay local to this worker
	}
	kv, err := ensureBreakerBucket(ctx, w.js, w.names)
	if err != nil {
		return err
	}
	x.cluster.KV, x.cluster.Types, x.joined = kv, types, true
	return nil
}

// ensureBreakerBucket binds the breaker bucket, creating it with the task
// stream's storage and replica count when missing.
func ensureBreakerBucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
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
