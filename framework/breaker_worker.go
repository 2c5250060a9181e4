package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

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

// breakerExt wires a worker's breakers to the cluster: it holds tasks
// refused by an open breaker, pauses the consumers of the task types that
// declared a dependency when its breaker opens, publishes state changes to
// the breaker bucket, and opens local breakers that other workers report
// open.
type breakerExt struct {
	w   *Worker
	reg *Breakers
	id  string

	// Set by prepare, read-only afterwards.
	types map[string][]string // dependency → task types declaring it
	kv    jetstream.KeyValue  // nil: no cluster coordination

	active atomic.Bool // the service runs and takes jobs
	mu     sync.Mutex
	jobs   map[string]breakerEvent
	wake   chan struct{}
}

// installBreakers gives w its breaker registry and extension.
func (w *Worker) installBreakers() {
	x := &breakerExt{w: w, reg: newBreakers(w.opts), id: nuid.Next(), wake: make(chan struct{}, 1)}
	x.reg.notify = x.notify
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
		service: x.service,
		hold:    x.hold,
	})
}

// Breakers returns the worker's circuit breaker registry, used by [Call]
// inside its handlers. Its States method is the breakers' dashboard.
func (w *Worker) Breakers() *Breakers { return w.breakers.reg }

func (x *breakerExt) prepare(ctx context.Context, w *Worker) error {
	x.types = make(map[string][]string)
	for _, tt := range w.order {
		for _, d := range tt.cfg.dependencies {
			x.types[d] = append(x.types[d], tt.name)
			if _, err := x.reg.get(d); err != nil {
				return err
			}
		}
	}
	if len(x.types) == 0 && len(w.opts.breakers) == 0 {
		return nil // breakers stay local to this worker
	}
	kv, err := ensureBreakerBucket(ctx, w.js, w.names)
	if err != nil {
		return err
	}
	x.kv = kv
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

// consumers returns the durable consumers, every priority, of this
// worker's task types that declared dep.
func (x *breakerExt) consumers(dep string) []string {
	var out []string
	for _, tt := range x.types[dep] {
		for _, p := range streams.Priorities {
			out = append(out, x.w.names.ConsumerName(tt, p))
		}
	}
	return out
}

// notify queues a local state change for the service. It runs on the
// caller's goroutine and never blocks.
func (x *breakerExt) notify(ev breakerEvent) {
	if ev.remote || !x.active.Load() {
		return
	}
	x.mu.Lock()
	if x.jobs == nil {
		x.jobs = make(map[string]breakerEvent)
	}
	x.jobs[ev.dep] = ev // a later change supersedes an unprocessed one
	x.mu.Unlock()
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

func (x *breakerExt) service(ctx context.Context, w *Worker) {
	if x.kv == nil {
		return
	}
	x.active.Store(true)
	defer x.active.Store(false)
	var updates <-chan jetstream.KeyValueEntry
	watcher, err := x.kv.WatchAll(ctx)
	if err != nil {
		w.log.Error("jetflow cannot watch the breaker bucket; breakers opened by other workers will not be seen",
			slog.Any(LogKeyError, err))
	} else {
		defer func() { _ = watcher.Stop() }()
		updates = watcher.Updates()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case e, ok := <-updates:
			if !ok {
				updates = nil
				continue
			}
			if e != nil {
				x.remote(ctx, e)
			}
		case <-x.wake:
			x.runJobs(ctx)
		}
	}
}

// runJobs publishes local state changes and, for an open breaker, pauses
// the consumers of the task types that declared the dependency.
func (x *breakerExt) runJobs(ctx context.Context) {
	x.mu.Lock()
	jobs := x.jobs
	x.jobs = nil
	x.mu.Unlock()
	for _, ev := range jobs {
		rec := BreakerRecord{Dependency: ev.dep, State: ev.to, Since: ev.at.UTC(), Worker: x.id,
			TaskTypes: x.types[ev.dep]}
		if ev.to == BreakerOpen {
			rec.Until = ev.until.UTC()
			rec.Failures = ev.failures
			rec.Consumers = x.consumers(ev.dep)
		}
		x.publish(ctx, rec)
		if ev.to == BreakerOpen {
			x.pause(ctx, ev.dep, rec.Consumers, ev.until)
		}
	}
}

func (x *breakerExt) publish(ctx context.Context, rec BreakerRecord) {
	data, err := json.Marshal(rec)
	if err != nil {
		x.w.log.Error("jetflow cannot encode breaker record", slog.Any(LogKeyError, err))
		return
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := x.kv.Put(pctx, rec.Dependency, data); err != nil {
		x.w.log.Warn("jetflow cannot publish breaker state", slog.String(LogKeyDependency, rec.Dependency),
			slog.String("state", rec.State.String()), slog.Any(LogKeyError, err))
	}
}

// pause pauses the named consumers until until, concurrently. Consumers
// that do not exist (a priority nobody serves) are skipped.
func (x *breakerExt) pause(ctx context.Context, dep string, consumers []string, until time.Time) {
	stream := x.w.names.TaskStream()
	var wg sync.WaitGroup
	for _, c := range consumers {
		wg.Go(func() {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := x.w.js.PauseConsumer(pctx, stream, c, until)
			switch {
			case err == nil:
				x.w.log.Info("jetflow consumer paused by circuit breaker", slog.String(LogKeyDependency, dep),
					slog.String("consumer", c), slog.Time("until", until))
			case errors.Is(err, jetstream.ErrConsumerNotFound):
			default:
				x.w.log.Warn("jetflow cannot pause consumer for circuit breaker", slog.String(LogKeyDependency, dep),
					slog.String("consumer", c), slog.Any(LogKeyError, err))
			}
		})
	}
	wg.Wait()
}

// remote handles a record written to the bucket: another worker's breaker
// opened, so open ours and pause our consumers it did not pause.
func (x *breakerExt) remote(ctx context.Context, e jetstream.KeyValueEntry) {
	if e.Operation() != jetstream.KeyValuePut {
		return
	}
	var rec BreakerRecord
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		x.w.log.Warn("jetflow ignores an undecodable breaker record", slog.String("key", e.Key()), slog.Any(LogKeyError, err))
		return
	}
	if rec.Worker == x.id || rec.State != BreakerOpen || !rec.Until.After(time.Now()) {
		return
	}
	b, err := x.reg.get(e.Key())
	if err != nil {
		return
	}
	b.forceOpen()
	var mine []string
	for _, c := range x.consumers(e.Key()) {
		if !slices.Contains(rec.Consumers, c) {
			mine = append(mine, c)
		}
	}
	x.pause(ctx, e.Key(), mine, rec.Until)
}

// hold reruns a task refused by an open breaker when the breaker lets
// probes through again, spread over a short window so that held tasks do
// not all ask at the same instant.
func (x *breakerExt) hold(_ *Task, err error) (time.Duration, bool) {
	var boe *BreakerOpenError
	if !errors.As(err, &boe) {
		return 0, false
	}
	d := max(time.Until(boe.Until), 0)
	spread := min(max(d/10, 10*time.Millisecond), 500*time.Millisecond)
	return d + rand.N(spread), true
}

// holdAside gives p's slot back for d, so that other tasks run meanwhile,
// then waits for a slot again. Heartbeats keep p alive all along. It
// returns false when the worker stops first; p was then handed back.
func (w *Worker) holdAside(p *pending, d time.Duration) bool {
	w.sched.Lend(p.tt.slots)

	// takeBack restores the slot accounting the deferred release of
	// execute expects, then hands p back.
	takeBack := func(why string) bool {
		w.sched.Unlend(p.tt.slots)
		w.handBack(p, why)
		return false
	}
	timer := time.NewTimer(d)
	select {
	case <-timer.C:
	case <-w.stopFetch:
		timer.Stop()
		return takeBack("worker stopping while the task was held")
	}
	// Queue for a slot like a fetched task; the grant signals p.dispatched
	// instead of starting a new execution.
	select {
	case <-p.dispatched: // a stale signal left by awaitDispatch
	default:
	}
	w.sched.Resume(p, p.prio.Rank(), p.tt.slots)
	select {
	case <-p.dispatched:
		return true
	case <-w.stopFetch:
		if w.withdraw(p) {
			return takeBack("worker stopping while the task was held")
		}
		<-p.dispatched // dispatched concurrently: the slot is ours
		w.handBack(p, "worker stopping while the task was held")
		return false
	}
}
