package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/settle"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
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

	// taskStream caches names.TaskStream(), read for every task.
	taskStream string

	types map[string]*typeRunner
	order []*typeRunner

	state atomic.Int32 // workerNew, workerRunning, workerStopping

	stopFetch   chan struct{} // closed: stop pulling
	stopOnce    sync.Once
	hardCtx     context.Context // handler contexts; cancelled at the shutdown deadline
	hardCancel  context.CancelFunc
	shutdownMu  sync.Mutex
	shutdownErr error
	finished    chan struct{} // closed when shutdown completed

	fetchers sync.WaitGroup
	execs    sync.WaitGroup

	// dispatcher state, guarded by mu
	mu       sync.Mutex
	free     int
	waiting  [streams.NumPriorities][]*pending
	inflight map[*pending]struct{}

	stats workerStats

	ext       []extension
	services  sync.WaitGroup
	svcCancel context.CancelFunc

	breakers *breakerExt // circuit breakers (breaker_worker.go)

	// hooks are the AddHooks hooks, then the WithHooks ones (last).
	hooks []Hooks
	// deadLetter is the dead-letter extension's writer, or nil (dlq.go).
	deadLetter func(ctx context.Context, t *Task, msg jetstream.Msg, cause error) error
	// stateWriter writes task records, when a registered type is tracked
	// (state.go); effects caches the effects bucket (once.go).
	stateWriter *stateWriter
	effects     effectsCache
}

const (
	workerNew int32 = iota
	workerRunning
	workerStopping
)

type typeRunner struct {
	name    string
	handler Handler
	cfg     handlerConfig
	free    int // local slots, guarded by Worker.mu
}

// pending is one fetched message, from the moment it leaves the pull buffer
// until its outcome is settled.
type pending struct {
	tt         *typeRunner
	prio       Priority
	msg        jetstream.Msg
	dispatched chan struct{} // receives once when a slot is granted
	settled    atomic.Bool   // set by whoever acks/naks/terms first
	// lastBeat is when the server last heard of this delivery (receipt or
	// InProgress), in Unix nanoseconds; the heartbeat sweeper reads it.
	lastBeat atomic.Int64
	// resume, guarded by Worker.mu, marks a held task waiting for a slot
	// again: its own goroutine continues it once dispatched.
	resume bool
}

// NewWorker returns a worker consuming on nc. See [Option] for settings.
func NewWorker(nc *nats.Conn, opts ...WorkerOption) (*Worker, error) {
	if nc == nil {
		return nil, fmt.Errorf("%w: nil connection", ErrInvalidOption)
	}
	o, err := newOptions(opts, WorkerOption.applyWorker)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("framework: jetstream: %w", err)
	}
	hardCtx, hardCancel := context.WithCancel(context.Background())
	w := &Worker{
		nc:         nc,
		js:         js,
		opts:       o,
		names:      o.names,
		taskStream: o.names.TaskStream(),
		log:        o.logger,
		types:      make(map[string]*typeRunner),
		stopFetch:  make(chan struct{}),
		hardCtx:    hardCtx,
		hardCancel: hardCancel,
		finished:   make(chan struct{}),
		free:       o.concurrency,
		inflight:   make(map[*pending]struct{}),
		bg:         background{execCh: make(chan *pending), stop: make(chan struct{})},
		hooks:      []Hooks{o.hooks},
	}
	w.installBreakers()
	w.installDeadLetters()
	w.installState()
	return w, nil
}

// Register adds the handler of taskType. It panics on programmer errors: an
// invalid or duplicate type, a nil handler, an invalid option, or a call after
// the worker started.
func (w *Worker) Register(taskType string, h Handler, opts ...HandlerOption) {
	if w.state.Load() != workerNew {
		panic("framework: Register called after the worker started")
	}
	if err := streams.ValidateTaskType(taskType); err != nil {
		panic(err)
	}
	if h == nil {
		panic(fmt.Sprintf("framework: nil handler for task type %q", taskType))
	}
	if _, dup := w.types[taskType]; dup {
		panic(fmt.Sprintf("framework: task type %q registered twice", taskType))
	}
	cfg, err := newHandlerConfig(w.opts.concurrency, opts)
	if err != nil {
		panic(fmt.Sprintf("framework: register %q: %v", taskType, err))
	}
	mw := append(append([]Middleware(nil), w.opts.middleware...), cfg.middleware...)
	tt := &typeRunner{name: taskType, handler: Chain(h, mw...), cfg: cfg, free: cfg.concurrency}
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

// Handle registers a typed handler: the payload is decoded into a T with the
// worker's codec (a []byte T receives the raw payload) before fn runs. A
// payload that cannot be decoded fails the task permanently with a
// *[DecodeError]; it is never retried. See [Worker.Register] for panics.
func Handle[T any](w *Worker, taskType string, fn func(ctx context.Context, t *Task, payload T) error, opts ...HandlerOption) {
	if fn == nil {
		panic(fmt.Sprintf("framework: nil handler for task type %q", taskType))
	}
	w.Register(taskType, TypedHandler(w.opts.codec, fn), opts...)
}

// TypedHandler returns the handler [Handle] registers: it decodes the
// payload into a T with codec c (nil means [JSONCodec]; a []byte T receives
// the raw payload) and calls fn, or fails the task permanently with a
// *[DecodeError] when the payload cannot be decoded.
func TypedHandler[T any](c Codec, fn func(ctx context.Context, t *Task, payload T) error) Handler {
	if c == nil {
		c = JSONCodec()
	}
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		var v T
		if err := decodePayload(c, t, &v); err != nil {
			return Permanent(err)
		}
		return fn(ctx, t, v)
	})
}

func decodePayload(codec Codec, t *Task, v any) error {
	if pb, ok := v.(*[]byte); ok {
		*pb = t.Payload
		return nil
	}
	enc := t.Header(HeaderEncoding)
	name := codec.Name()
	if enc != "" && enc != taskmsg.EncodingRaw && enc != name {
		return &DecodeError{TaskType: t.Type, Encoding: enc,
			Err: fmt.Errorf("payload was encoded with codec %q but the worker uses %q", enc, name)}
	}
	if len(t.Payload) == 0 {
		return nil // zero value
	}
	if err := codec.Unmarshal(t.Payload, v); err != nil {
		if enc == "" {
			enc = name
		}
		return &DecodeError{TaskType: t.Type, Encoding: enc, Err: err}
	}
	return nil
}

// Types returns the registered task types in registration order.
func (w *Worker) Types() []string {
	out := make([]string, len(w.order))
	for i, tt := range w.order {
		out[i] = tt.name
	}
	return out
}

// Start ensures the consumers of every registered (type, priority) pair and
// starts pulling. It returns once the worker runs; stop it with
// [Worker.Shutdown]. It returns [ErrNoHandlers] without handlers and
// [ErrWorkerClosed] when called twice.
func (w *Worker) Start(ctx context.Context) error {
	if len(w.order) == 0 {
		return ErrNoHandlers
	}
	if !w.state.CompareAndSwap(workerNew, workerRunning) {
		return ErrWorkerClosed
	}
	type sub struct {
		tt   *typeRunner
		prio Priority
		cons jetstream.Consumer
	}
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
	for i := range w.ext {
		if f := w.ext[i].prepare; f != nil {
			if err := f(ctx, w); err != nil {
				return fail(fmt.Errorf("%s: %w", w.ext[i].name, err))
			}
		}
	}
	var subs []sub
	for _, tt := range w.order {
		for _, p := range tt.cfg.priorities {
			cons, err := streams.EnsureConsumer(ctx, w.js, w.names, w.consumerSpec(tt, p))
			if err != nil {
				return fail(err)
			}
			subs = append(subs, sub{tt, p, cons})
		}
	}
	w.startBackground()
	svcCtx, svcCancel := context.WithCancel(context.Background())
	w.svcCancel = svcCancel
	for i := range w.ext {
		if f := w.ext[i].service; f != nil {
			w.services.Add(1)
			go func() {
				defer w.services.Done()
				f(svcCtx, w)
			}()
		}
	}
	for _, s := range subs {
		w.fetchers.Add(1)
		go w.fetch(s.tt, s.prio, s.cons)
	}
	w.log.Info("jetflow worker started", slog.Int("types", len(w.order)), slog.Int("consumers", len(subs)),
		slog.Int("concurrency", w.opts.concurrency))
	return nil
}

func (w *Worker) consumerSpec(tt *typeRunner, p Priority) streams.ConsumerSpec {
	return streams.ConsumerSpec{
		TaskType:      tt.name,
		Priority:      p,
		MaxDeliver:    tt.cfg.maxAttempts,
		AckWait:       tt.cfg.ackWait,
		MaxAckPending: tt.cfg.maxInFlight,
	}
}

// Run starts the worker ([Worker.Start]) and blocks until ctx ends or
// [Worker.Shutdown] is called. It then stops pulling, lets running tasks
// finish for up to the shutdown timeout ([WithShutdownTimeout]) and hands
// back whatever could not finish, for immediate redelivery. It returns nil
// after a clean shutdown.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.Start(ctx); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-w.stopFetch:
		<-w.finished
		return w.result()
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.shutdownTimeout)
	defer cancel()
	return w.Shutdown(sctx)
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
		close(w.stopFetch)
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
	w.mu.Lock()
	var back []*pending
	for p := range w.inflight {
		back = append(back, p)
	}
	w.mu.Unlock()
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
	if err := p.msg.Nak(); err != nil {
		w.ackFailed(context.Background(), nil, p, "nak", err)
		return
	}
	w.stats.handedBack.Add(1)
	w.log.Debug("jetflow task handed back", slog.String(LogKeyTaskType, p.tt.name), slog.String("reason", why))
}

// fetch pulls one (type, priority) consumer and feeds the dispatcher, holding
// at most one message outside the pull buffer at a time.
func (w *Worker) fetch(tt *typeRunner, prio Priority, cons jetstream.Consumer) {
	defer w.fetchers.Done()
	stopCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-w.stopFetch:
			cancel()
		case <-stopCtx.Done():
		}
	}()
	wait := pullRetry.New()
	for {
		it, err := cons.Messages(jetstream.PullMaxMessages(tt.cfg.prefetch))
		if err == nil {
			err = w.serve(stopCtx, tt, prio, it)
			if stopCtx.Err() != nil {
				w.drain(it)
				return
			}
			it.Stop()
			if errors.Is(err, errPullIdle) || errors.Is(err, errRescued) {
				wait.Reset()
				continue // a fresh iterator at once, with a fresh pull request
			}
		}
		// The iterator failed (consumer deleted, connection trouble): log,
		// wait, re-ensure the consumer and resume.
		d := wait.NextBackOff()
		w.log.Warn("jetflow consumer pull interrupted; retrying", slog.String(LogKeyTaskType, tt.name),
			slog.String(LogKeyPriority, prio.String()), slog.Duration("retry_in", d), slog.Any(LogKeyError, err))
		if !retry.Sleep(stopCtx, d) {
			return
		}
		ectx, ecancel := context.WithTimeout(stopCtx, 10*time.Second)
		c, err := streams.EnsureConsumer(ectx, w.js, w.names, w.consumerSpec(tt, prio))
		ecancel()
		if err == nil {
			cons = c
		}
	}
}

// pullRetry spaces the attempts to resume a failed pull.
var pullRetry = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// nextPoll bounds each wait for the next message. The pull iterator of
// nats.go (v1.55.0) decides whether to send a new pull request only when Next
// starts or receives something, and skips it while its previous request is
// still being sent; if that request is then answered in full before the
// sender finishes (a busy host), the iterator waits with no request
// outstanding until two heartbeats are missed, 30 s by default. Returning
// from Next every nextPoll makes it check again, bounding such a stall. It is
// also how soon an idle fetcher notices that the worker stops.
const nextPoll = 250 * time.Millisecond

// pullIdleRestart is how long a fetcher waits without receiving anything
// before it replaces its pull iterator. The iterator counts the messages its
// pull requests may still bring and sends no new request meanwhile; it
// forgets a request only on a status from the server or after two missed
// idle heartbeats. A consumer leader that crashes sends no status, and
// missed heartbeats are checked only within a single Next call, which
// nextPoll keeps short: without this, a fetcher whose consumer leader
// crashed would wait forever. Twice the iterator's default heartbeat, like
// its own check; on an idle consumer it costs one new pull request each time.
const pullIdleRestart = 30 * time.Second

// errPullIdle ends serve after pullIdleRestart without a message.
var errPullIdle = errors.New("framework: pull iterator idle")

// serve reads it until stop, a terminal iterator error, or errPullIdle.
func (w *Worker) serve(stop context.Context, tt *typeRunner, prio Priority, it jetstream.MessagesContext) error {
	errStreak := 0
	poll := jetstream.NextMaxWait(nextPoll)
	lastMsg := time.Now()
	for {
		msg, err := it.Next(poll)
		if err != nil {
			if stop.Err() != nil {
				return nil
			}
			if errors.Is(err, nats.ErrTimeout) {
				if time.Since(lastMsg) >= pullIdleRestart {
					return errPullIdle
				}
				continue // nothing within nextPoll: loop, so the iterator re-checks its pull requests
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
				errors.Is(err, jetstream.ErrConsumerNotFound) {
				return err
			}
			// Transient (missed heartbeat, reconnect): the iterator recovers
			// by itself; avoid spinning.
			errStreak++
			if errStreak > 1 {
				select {
				case <-stop.Done():
					return nil
				case <-time.After(min(time.Duration(errStreak)*50*time.Millisecond, time.Second)):
				}
			}
			continue
		}
		errStreak = 0
		p := w.newPending(tt, prio, msg)
		w.offer(p)
		dispatched, starved := w.awaitSlot(stop, p, tt.cfg.ackWait/2)
		if starved {
			// p has waited half an ack wait for a slot: the tasks behind it
			// in the pull buffer get no heartbeats and would be redelivered
			// (spending an attempt). Take them out of the buffer, where the
			// sweeper keeps them alive, and pull again only once they ran.
			return w.rescue(stop, it, tt, prio, p)
		}
		if !dispatched {
			return nil
		}
		lastMsg = time.Now()
	}
}

// errRescued ends serve after its pull buffer was emptied into the waiting
// lists because a task starved (see rescue).
var errRescued = errors.New("framework: pull buffer rescued from starvation")

func (w *Worker) newPending(tt *typeRunner, prio Priority, msg jetstream.Msg) *pending {
	p := &pending{tt: tt, prio: prio, msg: msg, dispatched: make(chan struct{}, 1)}
	p.lastBeat.Store(time.Now().UnixNano())
	return p
}

// awaitSlot waits until p is dispatched (true, false), the worker stops
// (false, false; p was handed back unless dispatched concurrently), or
// starveAfter passes (false, true; p still waits).
func (w *Worker) awaitSlot(stop context.Context, p *pending, starveAfter time.Duration) (dispatched, starved bool) {
	select {
	case <-p.dispatched:
		return true, false
	default:
	}
	timer := time.NewTimer(starveAfter)
	defer timer.Stop()
	select {
	case <-p.dispatched:
		return true, false
	case <-timer.C:
		return false, true
	case <-stop.Done():
		if w.withdraw(p) {
			w.handBack(p, "worker stopping")
			return false, false
		}
		return true, false
	}
}

// rescue drains the iterator's buffer into the waiting lists, where the
// heartbeat sweeper covers every task, then waits until held and rescued
// tasks were all dispatched (or the worker stops). It returns errRescued so
// that fetch opens a fresh iterator.
func (w *Worker) rescue(stop context.Context, it jetstream.MessagesContext, tt *typeRunner, prio Priority, held *pending) error {
	it.Drain()
	batch := []*pending{held}
	for {
		msg, err := it.Next(jetstream.NextMaxWait(100 * time.Millisecond))
		if err != nil {
			break
		}
		q := w.newPending(tt, prio, msg)
		w.offer(q)
		batch = append(batch, q)
	}
	w.log.Debug("jetflow fetched tasks starved; holding them with heartbeats", slog.String(LogKeyTaskType, tt.name),
		slog.String(LogKeyPriority, prio.String()), slog.Int("tasks", len(batch)))
	for _, q := range batch {
		if !w.awaitDispatch(stop, q) {
			// Stopping: hand back the rest still waiting.
			for _, r := range batch {
				if w.withdraw(r) {
					w.handBack(r, "worker stopping")
				}
			}
			return nil
		}
	}
	return errRescued
}

// awaitDispatch waits until p gets a slot; the heartbeat sweeper keeps it
// alive meanwhile, so a task held back by higher priorities does not time
// out. It returns false (after handing p back) when the worker stops first.
func (w *Worker) awaitDispatch(stop context.Context, p *pending) bool {
	select {
	case <-p.dispatched:
		return true
	case <-stop.Done():
		if w.withdraw(p) {
			w.handBack(p, "worker stopping")
			return false
		}
		return true // dispatched concurrently; its execution owns it
	}
}

// drain hands back the messages still in the pull buffer.
func (w *Worker) drain(it jetstream.MessagesContext) {
	it.Drain()
	for {
		msg, err := it.Next(jetstream.NextMaxWait(200 * time.Millisecond))
		if err != nil {
			return
		}
		if err := msg.Nak(); err != nil {
			w.stats.ackErrors.Add(1)
			w.log.Warn("jetflow could not hand back a buffered task; it will be redelivered after its ack wait",
				slog.Any(LogKeyError, err))
			continue
		}
		w.stats.handedBack.Add(1)
	}
}

// offer queues p for a slot and dispatches what can run.
func (w *Worker) offer(p *pending) {
	w.mu.Lock()
	r := p.prio.Rank()
	w.waiting[r] = append(w.waiting[r], p)
	w.dispatchLocked()
	w.mu.Unlock()
}

// withdraw removes p from the waiting lists; false if it was dispatched.
func (w *Worker) withdraw(p *pending) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	r := p.prio.Rank()
	for i, q := range w.waiting[r] {
		if q == p {
			w.waiting[r] = append(w.waiting[r][:i], w.waiting[r][i+1:]...)
			return true
		}
	}
	return false
}

// dispatchLocked starts waiting tasks while slots are free. w.mu must be held.
func (w *Worker) dispatchLocked() {
	for w.free > 0 {
		r, i := w.pickLocked()
		if r < 0 {
			return
		}
		p := w.waiting[r][i]
		w.waiting[r] = append(w.waiting[r][:i], w.waiting[r][i+1:]...)
		w.free--
		p.tt.free--
		w.inflight[p] = struct{}{}
		if p.resume { // a held task: its goroutine waits for the slot
			p.resume = false
			p.dispatched <- struct{}{}
			continue
		}
		w.execs.Add(1)
		p.dispatched <- struct{}{}
		select {
		case w.bg.execCh <- p: // an idle executor (heartbeats.go) takes it
		default:
			go w.execute(p)
		}
	}
}

// pickLocked returns the rank and index of the next task to start, or -1.
func (w *Worker) pickLocked() (int, int) {
	var idx [streams.NumPriorities]int
	eligible := 0
	total := 0
	for r := range w.waiting {
		idx[r] = -1
		for i, p := range w.waiting[r] {
			if p.tt.free > 0 {
				idx[r] = i
				break
			}
		}
		if idx[r] < 0 {
			continue
		}
		if w.opts.dispatch == DispatchStrict {
			return r, idx[r]
		}
		eligible++
		total += w.opts.weights[r]
	}
	if eligible == 0 {
		return -1, -1
	}
	n := rand.IntN(total)
	for r := range w.waiting {
		if idx[r] < 0 {
			continue
		}
		if n < w.opts.weights[r] {
			return r, idx[r]
		}
		n -= w.opts.weights[r]
	}
	return -1, -1
}

func (w *Worker) release(p *pending) {
	w.mu.Lock()
	delete(w.inflight, p)
	w.free++
	p.tt.free++
	w.dispatchLocked()
	w.mu.Unlock()
	w.execs.Done()
}

// execute runs one task and settles its outcome.
func (w *Worker) execute(p *pending) {
	defer w.release(p)
	t := w.newTask(p)

	// The heartbeat sweeper keeps the task alive while it waits for its
	// time or runs (heartbeats.go).

	// A due time that cannot be trusted fails the task for good rather than
	// holding a slot until a bogus time.
	if err := checkSchedule(t, p.msg); err != nil {
		w.settle(w.hardCtx, t, p, err, 0)
		return
	}
	// Never start early: the server may fire a schedule slightly before the
	// due time.
	if !t.ScheduledFor.IsZero() {
		if wait := time.Until(t.ScheduledFor); wait > 0 {
			w.stats.heldEarly.Add(1)
			timer := time.NewTimer(wait)
			select {
			case <-timer.C:
			case <-w.hardCtx.Done():
				timer.Stop()
				w.handBack(p, "shutdown before due time")
				return
			}
		}
	}

	base := context.WithValue(w.hardCtx, taskKey{}, t)
	var err error
	var took time.Duration
	for {
		took, err = w.runOnce(base, p, t)
		if err == nil || IsPermanent(err) {
			break
		}
		d, ok := w.holdFor(t, err)
		if !ok {
			break
		}
		// Rerun in process later without spending a delivery; heartbeats
		// keep the task alive meanwhile, and its slot serves other tasks.
		t.Logger().Info("jetflow task held in process", slog.Any(LogKeyError, err), slog.Duration("rerun_in", d))
		if !w.holdAside(p, d) {
			return // handed back: the worker is stopping
		}
	}
	w.settle(base, t, p, err, took)
}

// runOnce runs the handler once with the type's timeout.
func (w *Worker) runOnce(base context.Context, p *pending, t *Task) (time.Duration, error) {
	cfg := &p.tt.cfg
	var ctx context.Context
	var cancel context.CancelFunc
	if cfg.timeout > 0 {
		ctx, cancel = context.WithTimeoutCause(base, cfg.timeout, ErrHandlerTimeout)
	} else {
		ctx, cancel = context.WithCancel(base)
	}
	defer cancel()
	w.stats.started.Add(1)
	w.emitStarted(ctx, t)
	start := time.Now()
	err := w.call(ctx, p.tt.handler, t)
	took := time.Since(start)
	if err != nil && errors.Is(context.Cause(ctx), ErrHandlerTimeout) && !errors.Is(err, ErrHandlerTimeout) {
		err = fmt.Errorf("%w after %v: %w", ErrHandlerTimeout, cfg.timeout, err)
	}
	return took, err
}

// call runs the handler, turning a panic into an error.
func (w *Worker) call(ctx context.Context, h Handler, t *Task) (err error) {
	defer func() {
		if r := recover(); r != nil {
			stack := debug.Stack()
			w.stats.panics.Add(1)
			t.Logger().Error("jetflow handler panicked", slog.Any("panic", r), slog.String("stack", string(stack)))
			err = fmt.Errorf("%w: %v", ErrPanic, r)
		}
	}()
	return h.Handle(ctx, t)
}

// classify turns an attempt's error into the input of the settlement
// decision.
func classify(err error, attempt int) settle.Result {
	r := settle.Result{Failed: err != nil, Permanent: IsPermanent(err), Attempt: attempt}
	var ra *RetryAfterError
	if errors.As(err, &ra) {
		r.RetryAfter, r.HasRetryAfter = ra.Delay, true
	}
	return r
}

// settle decides what to do with t after its attempt ended with err
// (internal/settle) and carries it out: Ack, Nak, dead letter and Term.
func (w *Worker) settle(ctx context.Context, t *Task, p *pending, err error, took time.Duration) {
	if !p.settled.CompareAndSwap(false, true) {
		return // handed back at the shutdown deadline
	}
	r := classify(err, t.Attempt)
	r.ShuttingDown = w.hardCtx.Err() != nil
	d := settle.Decide(r, settle.Policy{MaxAttempts: t.MaxAttempts, Backoff: p.tt.cfg.backoff.Delay,
		DeadLetters: w.deadLetter != nil})
	o := Outcome{Err: err, Took: took, Delay: d.Delay, Panicked: errors.Is(err, ErrPanic)}
	log := t.Logger()
	switch d.Action {
	case settle.Ack:
		if aerr := p.msg.Ack(); aerr != nil {
			w.ackFailed(ctx, t, p, "ack", aerr)
			return
		}
		w.stats.succeeded.Add(1)
		o.Action = ActionAck
	case settle.HandBack:
		// Cancelled by shutdown: not the task's fault.
		if nerr := p.msg.Nak(); nerr != nil {
			w.ackFailed(ctx, t, p, "nak", nerr)
		}
		w.stats.handedBack.Add(1)
		return
	case settle.Fail:
		if d.DeadLetter {
			dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			dlErr := w.deadLetter(dctx, t, p.msg, err)
			cancel()
			if dlErr != nil {
				// Never terminate what could not be dead-lettered.
				delay := p.tt.cfg.backoff.Delay(t.Attempt)
				log.Error("jetflow could not dead-letter task; retrying it later", slog.Any(LogKeyError, dlErr),
					slog.Any("cause", err), slog.Duration("retry_in", delay))
				if nerr := p.msg.NakWithDelay(delay); nerr != nil {
					w.ackFailed(ctx, t, p, "nak", nerr)
				}
				return
			}
			o.DeadLettered = true
		}
		w.stats.failed.Add(1)
		if r.Permanent {
			log.Error("jetflow task failed permanently; not retried", slog.Any(LogKeyError, err))
		} else {
			log.Error("jetflow task failed on its last attempt", slog.Any(LogKeyError, err), slog.Int("max_attempts", t.MaxAttempts))
		}
		if d.Term {
			if terr := p.msg.TermWithReason(truncateUTF8(err.Error(), maxTermReason)); terr != nil {
				w.ackFailed(ctx, t, p, "term", terr)
			}
		} else if nerr := p.msg.Nak(); nerr != nil {
			// Handed back without delay: the server sees MaxDeliver reached,
			// keeps the message and emits a max-deliveries advisory for the
			// dead-letter router.
			w.ackFailed(ctx, t, p, "nak", nerr)
		}
		o.Action = ActionFail
	case settle.Retry:
		w.stats.retried.Add(1)
		log.Warn("jetflow task failed; will retry", slog.Any(LogKeyError, err), slog.Duration("retry_in", d.Delay))
		var nerr error
		if d.Delay > 0 {
			nerr = p.msg.NakWithDelay(d.Delay)
		} else {
			nerr = p.msg.Nak()
		}
		if nerr != nil {
			w.ackFailed(ctx, t, p, "nak", nerr)
			return
		}
		o.Action = ActionRetry
	}
	w.emitFinished(ctx, t, o)
}

// maxTermReason bounds the reason sent with a Term.
const maxTermReason = 1024

// ackFailed logs and counts an Ack, Nak, InProgress or Term that could not
// be sent, and reports it to the AckFailed hook. t may be nil (heartbeats,
// hand-backs): the task is then read from p's message and put in ctx.
func (w *Worker) ackFailed(ctx context.Context, t *Task, p *pending, op string, err error) {
	w.stats.ackErrors.Add(1)
	w.log.Error("jetflow could not "+op+" task; it will be redelivered after its ack wait",
		slog.String(LogKeyTaskType, p.tt.name), slog.Any(LogKeyError, err))
	if t == nil {
		t = w.newTask(p)
	}
	if TaskFromContext(ctx) == nil {
		ctx = ContextWithTask(ctx, t)
	}
	w.emitAckFailed(ctx, t, op, err)
}

func (w *Worker) newTask(p *pending) *Task {
	t := &Task{
		Type:        p.tt.name,
		Priority:    p.prio,
		MaxAttempts: p.tt.cfg.maxAttempts,
		Headers:     p.msg.Headers(),
		Payload:     p.msg.Data(),
		Stream:      w.taskStream,
		Attempt:     1,
		baseLogger:  w.log,
		worker:      w,
	}
	if md, err := p.msg.Metadata(); err == nil {
		t.Attempt = int(md.NumDelivered)
		t.Sequence = md.Sequence.Stream
		t.EnqueuedAt = md.Timestamp
	}
	if h := t.Headers; h != nil {
		if ts := taskmsg.ParseTime(h.Get(HeaderEnqueuedAt)); !ts.IsZero() {
			t.EnqueuedAt = ts
		}
		t.ScheduledFor = taskmsg.ParseTime(h.Get(HeaderScheduledFor))
	}
	t.ID = taskmsg.ID(t.Headers, t.Sequence, t.EnqueuedAt)
	return t
}

// truncate cuts s to at most n bytes without splitting a UTF-8 character.
func truncate(s string, n int) string { return truncateUTF8(s, n) }

// truncateUTF8 cuts s to at most n bytes without splitting a UTF-8
// character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
