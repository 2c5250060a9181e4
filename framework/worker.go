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

	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/dispatch"
	"github.com/jetflow-io/jetflow/internal/exec"
	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/lanes"
	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/stranded"
	"github.com/jetflow-io/jetflow/internal/topology"
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
	bg    background // heartbeat sweeper and executors (heartbeats.go)
	// yieldHook replaces the executors' runtime.Gosched between tasks in
	// tests, and wallHook the wall clock that a delayed task's due time is
	// compared with (execute.go, newExecutor).
	yieldHook func()
	wallHook  func() time.Time
	// lastStart is when a task of each priority last started (pullsize.go).
	lastStart *pull.Starts

	parts       atomic.Pointer[topology.PartitionSet] // the task partitions served (partitions.go); one before Start
	growMu      sync.Mutex                            // held while fetchers of added partitions start
	warnedParts atomic.Int32                          // the partition count last warned of

	types map[string]*typeRunner
	order []*typeRunner

	state atomic.Int32 // workerNew, workerRunning, workerStopping

	stopFetch   chan struct{} // closed: stop pulling
	lanes       *lanes.Plan   // which lanes of ordered types the worker pulls (laneplan.go)
	laneSides   sync.Map      // *laneSide → struct{}: the lanes pulled now (lanes.go)
	versions    fleet.Gate    // payload versions handed back (versions.go)
	stopOnce    sync.Once
	hardCtx     context.Context // handler contexts; cancelled at the shutdown deadline
	hardCancel  context.CancelFunc
	shutdownMu  sync.Mutex
	shutdownErr error
	finished    chan struct{} // closed when shutdown completed
	connLost    chan struct{} // closed when the connection closed for good (liveness.go)
	stalled     chan struct{} // closed when a fetch loop stalled (liveness.go)
	stallErr    atomic.Pointer[error]

	fetchers sync.WaitGroup
	execs    sync.WaitGroup

	// sched shares the worker's slots among fetched tasks
	// (internal/dispatch).
	sched *dispatch.Scheduler[*pending]

	stats workerStats

	health  liveness.Loops // fetch loops' last polls (liveness.go)
	started atomic.Int64   // Unix nanoseconds of Start

	ext       []extension
	mover     *delays.Mover // nil with WithDelayMover(false)
	services  sync.WaitGroup
	svcCancel context.CancelFunc

	// hooks are the AddHooks hooks (the first addedHooks of them), then the
	// WithHooks ones, each group in the order given.
	hooks      []Hooks
	addedHooks int
	// deadLetter is the dead-letter extension's writer, or nil (dlq.go).
	deadLetter func(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error
	// tracker writes task records, when a registered type is tracked
	// (state_tracking.go); effects caches the effects bucket (state.go).
	tracker *staterec.Tracker
	effects jsapi.BucketCache
	// strandCheck looks for stranded tasks (stranded.go).
	strandCheck stranded.Checker
	// starting is what Start waits for (startwait.go).
	starting startWaits
}

const (
	workerNew      = int32(liveness.New)
	workerRunning  = int32(liveness.Running)
	workerStopping = int32(liveness.Stopping)
)

type typeRunner struct {
	name    string
	handler Handler
	cfg     handlerConfig
	slots   *dispatch.Class                 // the type's concurrency on this worker
	pace    taskPace                        // handler times, for the pull size (pullsize.go)
	backoff func(attempt int) time.Duration // cfg.backoff.Delay, bound once
}

// pending is one fetched message, from the moment it leaves the pull buffer
// until its outcome is settled.
type pending struct {
	tt  *typeRunner
	msg jetstream.Msg
	// dispatched receives once when a slot is granted: set for a task that
	// is offered to the scheduler, nil for one taken directly from a pull
	// buffer (takeBuffered), which never waits for a grant.
	dispatched chan struct{}
	// src is the fetcher's feed the task came from, nil for a task of a
	// rescued or closing pull buffer.
	src *feed
	// lastBeat is when the server last heard of this delivery (receipt or
	// InProgress), in Unix nanoseconds; the heartbeat sweeper reads it.
	lastBeat atomic.Int64
	// prio, rerun and settled share one word (a pending task is allocated
	// for every task: its size class counts).
	prio Priority
	// rerun is set while the task is parked (hold.go): its next execution
	// reruns the handler rather than starting the task.
	rerun   bool
	settled atomic.Bool // set by whoever acks/naks/terms first
	// lane is the runner of the lane the task came from, nil for other
	// tasks (lanes.go).
	lane *lanes.Runner[*pending]

	// Owned by the execution (execute.go), allocated with the pending task
	// rather than one by one: the task, the context that carries it, the
	// context of the first attempt, and the current attempt's (first's, or
	// a rerun's own).
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
		lastStart:  pull.NewStarts(len(streams.Priorities)),
		log:        o.logger,
		types:      make(map[string]*typeRunner),
		stopFetch:  make(chan struct{}),
		hardCtx:    hardCtx,
		hardCancel: hardCancel,
		finished:   make(chan struct{}),
		connLost:   make(chan struct{}),
		stalled:    make(chan struct{}),
		bg:         background{},
		hooks:      append([]Hooks(nil), o.hooks...),
	}
	w.parts.Store(topology.NewPartitionSet(o.names, streams.Layout{Partitions: 1, Ordered: 1}))
	w.sched = dispatch.New(o.concurrency, o.weighted, o.weights, w.granted)
	w.bg.attempts = w.newExecutor()
	w.bg.pool = exec.NewPool(w.bg.attempts.Run)
	w.installDeadLetters()
	w.installState()
	w.installUnique()
	w.installOrdering()
	w.installDelayMover()
	w.installFleet()          // fleet.go
	w.lanes = w.newLanePlan() // laneplan.go; after the worker ID is set
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
	tt := &typeRunner{name: taskType, handler: Chain(h, mw...), cfg: cfg, slots: dispatch.NewClass(cfg.concurrency), backoff: cfg.backoff.Delay}
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
		w.stopOnce.Do(func() { close(w.stopFetch) })
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
	err := w.starting.waitingFor("the task partitions", func() error {
		return w.startStep(ctx, w.discoverPartitions) // partitions.go
	})
	if err != nil {
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
			err := w.starting.waitingFor("set-up of "+w.ext[i].Name, func() error {
				return w.startStep(ctx, func(ctx context.Context) error { return f(ctx, w) })
			})
			if err != nil {
				return fail(fmt.Errorf("%s: %w", w.ext[i].Name, err))
			}
		}
	}
	subs, err := w.ensureConsumers(ctx)
	if err != nil {
		return fail(err)
	}
	for i := range w.ext {
		if f := w.ext[i].consumers; f != nil {
			more, err := f(ctx, w, w.partitions())
			if err != nil {
				return fail(fmt.Errorf("%s: %w", w.ext[i].Name, err))
			}
			subs = append(subs, more...)
		}
	}
	w.startBackground()
	svcCtx, svcCancel := context.WithCancel(context.Background())
	w.svcCancel = svcCancel
	for i := range w.ext {
		if f := w.ext[i].Service; f != nil {
			w.services.Add(1)
			go func() {
				defer w.services.Done()
				f(svcCtx, w)
			}()
		}
	}
	w.startStrandedCheck(ctx, svcCtx) // stranded.go
	for _, s := range subs {
		w.health.Loop(w.names.ConsumerName(s.tt.name, s.prio)) // watched from the start
		w.fetchers.Add(1)
		go w.fetch(s)
	}
	go w.watchConnection() // liveness.go
	go w.watchStalls()     // liveness.go
	w.log.Info("jetflow worker started", slog.Int("types", len(w.order)), slog.Int("consumers", len(subs)),
		slog.Int("concurrency", w.opts.concurrency))
	return nil
}

// consumerSub is one consumer a worker pulls: a (type, priority) consumer,
// or one an extension added (ordered partitions). ensure re-creates it after
// a failure.
type consumerSub struct {
	tt     *typeRunner
	prio   Priority
	cons   jetstream.Consumer
	ensure func(ctx context.Context) (jetstream.Consumer, error)
	lane   bool // a lane of an ordered type (lanes.go)
	part   int  // the task partition of a lane's consumer
}

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
	case <-w.connLost:
		cause = w.errConnLost()
	case <-w.stalled:
		cause = *w.stallErr.Load()
	case <-w.stopFetch:
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
		w.growMu.Lock() // no fetcher of an added partition starts after this (partitions.go)
		close(w.stopFetch)
		w.growMu.Unlock()
		w.bg.attempts.StopParked() // parked tasks hand themselves back
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
	idle := false // every execution returned
	defer func() { w.stopBackground(idle) }()
	w.svcCancel()
	defer w.services.Wait()
	w.fetchers.Wait()
	done := make(chan struct{})
	go func() { w.execs.Wait(); close(done) }()
	select {
	case <-done:
		idle = true
		w.hardCancel()
		w.log.Info("jetflow worker stopped")
		return nil
	case <-ctx.Done():
	}
	// Take the running tasks before cancelling their contexts: a handler
	// that returns at once hands its task back itself (settle), and must
	// still count among the tasks the deadline interrupted.
	back := w.sched.Running()
	w.hardCancel()
	for _, p := range back {
		w.handBack(p, "shutdown deadline")
	}
	w.log.Warn("jetflow worker shutdown deadline passed; running tasks handed back", slog.Int("tasks", len(back)))
	// Give cancelled handlers a moment to return; a handler that ignores its
	// context is abandoned (its result is discarded).
	grace := time.NewTimer(time.Second)
	defer grace.Stop()
	select {
	case <-done:
		idle = true
	case <-grace.C:
	}
	err := fmt.Errorf("framework: shutdown: %d running tasks handed back: %w", len(back), ctx.Err())
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

// handBack returns a task to the server for immediate redelivery, unless its
// outcome was already settled.
func (w *Worker) handBack(p *pending, why string) {
	if !p.settled.CompareAndSwap(false, true) {
		return
	}
	laneSettled(p, true)
	if err := p.msg.Nak(); err != nil {
		w.ackFailed(context.Background(), nil, p, "nak", err)
		return
	}
	w.stats.HandedBack.Add(1)
	w.log.Debug("jetflow task handed back", slog.String(LogKeyTaskType, p.tt.name), slog.String("reason", why))
}
