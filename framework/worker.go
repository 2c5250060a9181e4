package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/attempt"
	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/hookset"
	"github.com/jetflow-io/jetflow/internal/intake"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/stranded"
	"github.com/jetflow-io/jetflow/internal/versiongate"
	"github.com/jetflow-io/jetflow/streams"
)

// Worker pulls tasks of its registered types and runs their handlers.
//
// Register handlers before [Worker.Run] or [Worker.Start]; registration is
// not safe concurrently with running. Run, Start and Shutdown are safe to call
// from different goroutines.
type Worker struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	opts  *options
	names streams.Names
	log   *slog.Logger
	// in is the intake (internal/intake): consumers, fetchers, lanes,
	// slots and executors, heartbeats and acks; attempts runs every task's
	// attempts (internal/attempt, execute.go).
	in       *intake.Stage[*typeRunner, taskState]
	attempts *attempt.Executor[*pending]
	// yieldHook replaces the executors' runtime.Gosched between tasks in
	// tests, and wallHook the wall clock that a delayed task's due time is
	// compared with (execute.go, newExecutor); nil outside tests.
	yieldHook func()
	wallHook  func() time.Time

	types map[string]*typeRunner
	order []*typeRunner

	state atomic.Int32 // workerNew, workerRunning, workerStopping

	versions    versiongate.Gate[*typeRunner, taskState] // payload versions (versions.go)
	stopOnce    sync.Once
	hardCtx     context.Context // handler contexts; cancelled at the shutdown deadline
	hardCancel  context.CancelFunc
	shutdownMu  sync.Mutex
	shutdownErr error
	finished    chan struct{} // closed when shutdown completed
	// live stops Run when the connection closed for good or a fetch loop
	// stalled (liveness.go).
	live *liveness.Watcher

	stats workerStats

	health  liveness.Loops // fetch loops' last polls (liveness.go)
	started atomic.Int64   // Unix nanoseconds of Start

	ext       []extension
	mover     *delays.Mover // nil with WithDelayMover(false)
	services  sync.WaitGroup
	svcCancel context.CancelFunc

	// events are the plugins' Started, Finished and Hold and the hooks'
	// worker events: the AddHooks ones, then the WithHooks ones (extensions.go).
	events hookset.Set[*Task, Outcome]
	// deadLetter is the dead-letter extension's writer, or nil (dlq.go).
	deadLetter func(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error
	// tracker writes task records, when a registered type is tracked
	// (state_tracking.go); effects caches the effects bucket (state.go).
	tracker *staterec.Tracker
	effects jsapi.BucketCache
	// strandCheck looks for stranded tasks (stranded.go).
	strandCheck stranded.Checker
	// starting is what Start waits for (startwait.go).
	starting liveness.StartWaits
}

const (
	workerNew      = int32(liveness.New)
	workerRunning  = int32(liveness.Running)
	workerStopping = int32(liveness.Stopping)
)

// typeRunner is a registered task type: in is the intake's view of it
// (intake.go), the rest the handler's.
type typeRunner struct {
	in      intake.Type[*typeRunner]
	name    string
	handler Handler
	cfg     handlerConfig
	backoff func(attempt int) time.Duration // cfg.backoff.Delay, bound once
}

// pending is one fetched message, from the moment it leaves the pull buffer
// until its outcome is settled (intake.Pending), with the execution's part
// of it (taskState).
type pending = intake.Pending[*typeRunner, taskState]

// taskState is owned by the execution (execute.go), allocated with the
// pending task rather than one by one: the task, the context that carries
// it, the context of the first attempt, and the current attempt's
// (first's, or a rerun's own).
type taskState struct {
	task  Task
	base  taskCtx
	first handlerCtx
	ctx   *handlerCtx
}

// NewWorker returns a worker consuming on nc, configured by [WorkerOption]s.
func NewWorker(nc *nats.Conn, opts ...WorkerOption) (*Worker, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	o, err := newOptions(opts, WorkerOption.applyWorker)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(asyncAckTimeout))
	if err != nil {
		return nil, fmt.Errorf("framework: jetstream: %w", err)
	}
	hardCtx, hardCancel := context.WithCancel(context.Background())
	w := &Worker{
		nc:         nc,
		js:         js,
		opts:       o,
		names:      o.names,
		log:        o.logger,
		types:      make(map[string]*typeRunner),
		hardCtx:    hardCtx,
		hardCancel: hardCancel,
		finished:   make(chan struct{}),
	}
	w.events.Log, w.events.Panics = o.logger, &w.stats.hookPanics
	for _, h := range o.hooks {
		w.events.Add(workerHooks(h))
	}
	w.installDeadLetters()
	w.installState()
	w.installUnique()
	w.installOrdering()
	w.installDelayMover()
	w.installFleet()             // fleet.go
	w.in = w.newStage()          // intake.go; after the worker ID is set
	w.live = w.newWatcher()      // liveness.go
	w.attempts = w.newExecutor() // execute.go
	return w, nil
}

// Register adds the handler of taskType. It panics on programmer errors: an
// invalid or duplicate type, a nil handler, an invalid option, or a call after
// the worker started.
func (w *Worker) Register(taskType string, h Handler, opts ...HandlerOption) {
	w.register(taskType, h, nil, opts)
}

// register is [Worker.Register]; typed, when not nil, builds the handler
// of a typed registration ([Handle]) from the type's options.
func (w *Worker) register(taskType string, h Handler, typed func(cfg *handlerConfig) Handler, opts []HandlerOption) {
	if w.state.Load() != workerNew {
		panic("framework: Register called after the worker started")
	}
	if err := streams.ValidateTaskType(taskType); err != nil {
		panic(err)
	}
	if h == nil && typed == nil {
		panic(fmt.Sprintf("framework: nil handler for task type %q", taskType))
	}
	if _, dup := w.types[taskType]; dup {
		panic(fmt.Sprintf("framework: task type %q registered twice", taskType))
	}
	cfg, err := newHandlerConfig(w.opts.concurrency, opts)
	if err != nil {
		panic(fmt.Sprintf("framework: register %q: %v", taskType, err))
	}
	if err := w.checkStrict(&cfg, typed != nil); err != nil {
		panic(fmt.Sprintf("framework: register %q: %v", taskType, err))
	}
	if typed != nil {
		h = typed(&cfg)
	}
	mw := append(append([]Middleware(nil), w.opts.middleware...), cfg.middleware...)
	tt := &typeRunner{name: taskType, handler: Chain(h, mw...), cfg: cfg, backoff: cfg.backoff.Delay}
	w.addType(tt) // intake.go
	w.types[taskType] = tt
	w.order = append(w.order, tt)
}

// HandleFunc registers fn as the handler of taskType. See [Worker.Register].
func (w *Worker) HandleFunc(taskType string, fn func(ctx context.Context, t *Task) error, opts ...HandlerOption) {
	if fn == nil {
		panic(fmt.Sprintf("framework: nil handler for task type %q", taskType))
	}
	w.Register(taskType, HandlerFunc(fn), opts...)
}

// Types returns the registered task types in registration order.
func (w *Worker) Types() []string {
	out := make([]string, len(w.order))
	for i, tt := range w.order {
		out[i] = tt.name
	}
	return out
}

// Start ensures the consumers of every registered (type, priority) pair
// (several at a time; the first error ends the others) and starts pulling.
// It returns once the worker runs; stop it with
// [Worker.Shutdown]. It returns [ErrNoHandlers] without handlers and
// [ErrWorkerClosed] when called twice. While the server is unreachable (or
// JetStream not ready) it waits and retries with backoff until ctx ends; a
// missing topology or a closed connection fails at once.
func (w *Worker) Start(ctx context.Context) error {
	if len(w.order) == 0 {
		return ErrNoHandlers
	}
	if !w.state.CompareAndSwap(workerNew, workerRunning) {
		return ErrWorkerClosed
	}
	w.started.Store(time.Now().UnixNano())
	defer w.starting.ReportSlow(w.log, slowStartReport, w.startedAt)()
	fail := func(err error) error {
		w.state.Store(workerStopping)
		// Mark the stop as done so that a later Shutdown returns at once
		// instead of tearing down what never started.
		w.stopOnce.Do(w.in.Stop)
		w.hardCancel()
		close(w.finished)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("framework: start worker: %w: %w", ErrTopologyMissing, err)
		}
		return fmt.Errorf("framework: start worker: %w", err)
	}
	if err := w.checkHandlerValues(); err != nil {
		return fail(err)
	}
	if err := w.step(ctx, "the task partitions", w.in.Discover); err != nil {
		return fail(err)
	}
	for i := range w.ext {
		if f := w.ext[i].Wrap; f != nil {
			for _, tt := range w.order {
				tt.handler = f(w, tt.name, tt.handler)
			}
		}
	}
	for i := range w.ext {
		if f := w.ext[i].Prepare; f != nil {
			if err := w.step(ctx, "set-up of "+w.ext[i].Name, func(ctx context.Context) error { return f(ctx, w) }); err != nil {
				return fail(fmt.Errorf("%s: %w", w.ext[i].Name, err))
			}
		}
	}
	subs, err := w.in.Ensure(ctx)
	if err != nil {
		return fail(err)
	}
	more, err := w.extConsumers(ctx, w.partitions(), false) // intake.go
	if err != nil {
		return fail(err)
	}
	subs = append(subs, more...)
	w.in.Start(w.attempts.Run)
	svcCtx, svcCancel := context.WithCancel(context.Background())
	w.svcCancel = svcCancel
	for i := range w.ext {
		if f := w.ext[i].Service; f != nil {
			w.services.Go(func() { f(svcCtx, w) })
		}
	}
	w.startStrandedCheck(ctx, svcCtx) // stranded.go
	w.in.Pull(subs)
	w.live.Watch(w.in.Stopped()) // liveness.go
	w.log.Info("jetflow worker started", slog.Int("types", len(w.order)), slog.Int("consumers", len(subs)),
		slog.Int("concurrency", w.opts.concurrency))
	return nil
}

// consumerSub is one consumer a worker pulls (intake.Source): a (type,
// priority) consumer, or one an extension added (ordered partitions,
// lanes).
type consumerSub = intake.Source[*typeRunner]

// Run starts the worker ([Worker.Start]) and blocks until ctx ends or
// [Worker.Shutdown] is called. It then stops pulling, lets running tasks
// finish for up to the shutdown timeout ([WithShutdownTimeout]) and hands
// back whatever could not finish, for immediate redelivery. It returns nil
// after a clean shutdown. If the connection is closed for good while the
// worker runs (nats.go gave up reconnecting, or it was closed), Run shuts the
// worker down and returns an error wrapping [ErrNotConnected]: a worker
// without a connection consumes nothing, so let the process exit and be
// restarted. Likewise, when a fetch loop hears nothing from its consumer for
// the stall limit ([Timings].StallLimit, default 2 minutes: a long outage, a
// deleted stream, a wedged pull), Run shuts down and returns an error
// wrapping [ErrPullStalled].
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	var cause error
	select {
	case <-ctx.Done():
	case <-w.live.Lost():
		cause = w.live.LostErr()
	case <-w.live.Stalled():
		cause = w.live.StallErr()
	case <-w.in.Stopped():
		<-w.finished
		return w.result()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.shutdownTimeout)
	defer cancel()
	err := w.Shutdown(sctx)
	if cause != nil {
		return cause
	}
	return err
}

// Shutdown stops pulling, waits for running tasks until ctx ends, then
// cancels their contexts and hands their tasks back for immediate
// redelivery (their later results are ignored). Tasks fetched but not
// started are handed back at once. It returns ctx's error if tasks had to be
// handed back, nil otherwise. Calling it again waits for the first call.
func (w *Worker) Shutdown(ctx context.Context) error {
	if w.state.CompareAndSwap(workerNew, workerStopping) {
		w.hardCancel()
		close(w.finished)
		return nil
	}
	first := false
	w.stopOnce.Do(func() {
		first = true
		w.state.Store(workerStopping)
		w.in.Stop()
		w.attempts.StopParked() // parked tasks hand themselves back
	})
	if !first {
		select {
		case <-w.finished:
			return w.result()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	defer close(w.finished)
	var back int
	var err error
	idle := false // every execution returned
	defer func() { w.in.StopBackground(idle) }()
	w.svcCancel()
	defer w.services.Wait()
	// The fetchers hand back what they hold; at ctx's end the running tasks
	// are handed back and their contexts cancelled (intake.Stage.Drain).
	if back, idle, err = w.in.Drain(ctx, w.hardCancel); err == nil {
		w.log.Info("jetflow worker stopped")
		return nil
	}
	err = fmt.Errorf("framework: shutdown: %d running tasks handed back: %w", back, err)
	w.shutdownMu.Lock()
	w.shutdownErr = err
	w.shutdownMu.Unlock()
	return err
}

func (w *Worker) result() error {
	w.shutdownMu.Lock()
	defer w.shutdownMu.Unlock()
	return w.shutdownErr
}
