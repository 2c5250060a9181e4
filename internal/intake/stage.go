package intake

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/dispatch"
	"github.com/jetflow-io/jetflow/internal/exec"
	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/heartbeat"
	"github.com/jetflow-io/jetflow/internal/lanes"
	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Config is what a [Stage] needs from its worker.
type Config[T, X any] struct {
	// Conn and JS are the worker's connection and JetStream context, Names
	// its topology.
	Conn  *nats.Conn
	JS    jetstream.JetStream
	Names streams.Names
	// Log is the worker's logger.
	Log *slog.Logger
	// Concurrency is the worker's slots and executors; Weighted and
	// Weights choose among the priorities (dispatch.New).
	Concurrency int
	Weighted    bool
	Weights     [dispatch.Ranks]int
	// Loops records each pull's polls for the stall watchdog.
	Loops *liveness.Loops
	// Counters are the worker's counters the stage counts in.
	Counters Counters
	// Self is the worker's ID in the registry and Workers reads the
	// registry, to tell which lanes the worker pulls (lanes.Plan); Ctx,
	// the worker's life, ends those reads.
	Self    string
	Workers func(ctx context.Context) (*fleet.Listing, error)
	Ctx     context.Context
	// Step runs a start-up step that talks to the server (ensuring a
	// consumer), named what, waiting while the server is unreachable.
	Step func(ctx context.Context, what string, step func(ctx context.Context) error) error
	// Grown returns the further consumers to pull in the task partitions
	// added while the worker runs (ordered partitions, lanes), once the
	// worker's features were told of them.
	Grown func(ctx context.Context, added []streams.Names) ([]Source[T], error)
	// AckFailed reports an Ack, Nak or InProgress of p that could not be
	// sent, op naming it.
	AckFailed func(p *Pending[T, X], op string, err error)
	// PullLost reports a pull request of a consumer of (taskType, prio)
	// that was lost and replaced (counted already).
	PullLost func(taskType string, prio streams.Priority)
}

// Counters are the worker's counters that the stage counts in; the worker
// owns them and may count in them too.
type Counters struct {
	// HandedBack counts tasks handed back unfinished, AckErrors the
	// buffered tasks whose hand-back could not be sent (the other failed
	// operations go to Config.AckFailed).
	HandedBack, AckErrors *atomic.Uint64
	// PullsLost counts lost pull requests, StartedDirect the tasks
	// started from a pull buffer's subscription.
	PullsLost, StartedDirect *atomic.Uint64
}

// Keys of the stage's log attributes (framework.LogKeyTaskType and its
// siblings; the package cannot import framework).
const (
	logKeyTaskType = "task_type"
	logKeyPriority = "priority"
	logKeyError    = "error"
)

// maxEnsuring bounds the consumers [Stage.Ensure] ensures at once.
const maxEnsuring = 8

// drainGrace is how long [Stage.Drain] gives cancelled handlers to
// return after the shutdown deadline; one that ignores its context is
// abandoned.
const drainGrace = time.Second

// Stage is a worker's intake: the consumers of its registered types, a
// fetcher or a lane's runner pulling each, the scheduler that shares the
// worker's slots among the tasks they bring, the direct paths from a pull
// buffer to an executor, the executors, the heartbeat sweeper and the
// acker. T is the worker's registration of a type, X its part of a
// pending task. Add types before Start; the other methods are safe for
// concurrent use.
type Stage[T, X any] struct {
	cfg   Config[T, X]
	types []*Type[T]

	// sched shares the worker's slots among fetched tasks; pool runs them
	// (nil before Start); beats keeps them and the pull buffers alive;
	// acker writes the executors' acks from one goroutine (nil before
	// Start).
	sched *dispatch.Scheduler[*Pending[T, X]]
	pool  *exec.Pool[*Pending[T, X]]
	beats heartbeat.Sweeper[*Pending[T, X]]
	acker *pull.Acker[*Pending[T, X]]

	// lastStart is when a task of each priority last started (pull size).
	lastStart *pull.Starts
	lanes     lanes.Plan // which lanes of ordered types the worker pulls
	laneSides sync.Map   // *laneSide → struct{}: the lanes pulled now

	parts       atomic.Pointer[topology.PartitionSet] // the task partitions served; one before Discover
	growMu      sync.Mutex                            // held while fetchers of added partitions start
	warnedParts atomic.Int32                          // the partition count last warned of

	running  atomic.Bool   // between Start and Stop
	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
	fetchers sync.WaitGroup
	execs    sync.WaitGroup
}

// New returns the stage of a worker configured by cfg.
func New[T, X any](cfg Config[T, X]) *Stage[T, X] {
	s := &Stage[T, X]{cfg: cfg, lastStart: pull.NewStarts(len(streams.Priorities)), stop: make(chan struct{})}
	s.parts.Store(topology.NewPartitionSet(cfg.Names, streams.Layout{Partitions: 1, Ordered: 1}))
	s.sched = dispatch.New(cfg.Concurrency, cfg.Weighted, cfg.Weights, s.granted)
	s.lanes = lanes.Plan{Self: cfg.Self, Ctx: cfg.Ctx, List: s.serving}
	return s
}

// Add registers t, setting its slots. It is not safe concurrently with
// the other methods.
func (s *Stage[T, X]) Add(t *Type[T]) {
	t.Slots = dispatch.NewClass(t.Concurrency)
	s.types = append(s.types, t)
}

// Start starts the services of the stage: the heartbeat sweeper, the
// acker and the executors, which run each task with run, in its loop
// (attempt.Executor.Run). Call it once, before [Stage.Pull].
func (s *Stage[T, X]) Start(run func(*Pending[T, X])) {
	var hbs []time.Duration
	for _, t := range s.types {
		hbs = append(hbs, t.Heartbeat)
	}
	s.beats.Start(heartbeat.Tick(hbs...), s.sched.Each, func(p *Pending[T, X], err error) {
		s.cfg.AckFailed(p, "in_progress", err)
	})
	s.acker = pull.NewAcker(s.cfg.Conn, func(p *Pending[T, X], err error) { s.cfg.AckFailed(p, "ack", err) })
	s.pool = exec.NewPool(run)
	s.pool.Start(s.cfg.Concurrency)
	s.running.Store(true)
}

// Pull pulls each of srcs, with a fetcher (internal/fetch) or a lane's
// runner (internal/lanes), until [Stage.Stop].
func (s *Stage[T, X]) Pull(srcs []Source[T]) {
	for _, src := range srcs {
		s.cfg.Loops.Loop(s.cfg.Names.ConsumerName(src.Type.Name, src.Prio)) // watched from the start
		s.fetchers.Add(1)
		go s.fetch(src)
	}
}

// FetchLoops returns the state of the fetch loop of each registered (type,
// priority) consumer, in registration order, for the worker's liveness
// report.
func (s *Stage[T, X]) FetchLoops() []liveness.FetchLoop {
	var out []liveness.FetchLoop
	for _, t := range s.types {
		for _, p := range t.Priorities {
			name := s.cfg.Names.ConsumerName(t.Name, p)
			l := s.cfg.Loops.Loop(name)
			out = append(out, liveness.FetchLoop{Type: t.Name, Priority: p, Consumer: name, LastPoll: l.LastPoll(), Busy: l.Busy()})
		}
	}
	return out
}

// Stopped is closed once the stage stops pulling.
func (s *Stage[T, X]) Stopped() <-chan struct{} { return s.stop }

// Stop stops pulling: nothing starts from a pull buffer directly any more,
// Stopped is closed, and no fetcher of an added partition starts after it.
// Safe to call more than once.
func (s *Stage[T, X]) Stop() {
	s.stopOnce.Do(func() {
		s.running.Store(false)
		s.growMu.Lock()
		close(s.stop)
		s.growMu.Unlock()
	})
}

// Drain, after Stop, waits for the fetchers to return (they hand back
// what they hold), then for the executions until ctx ends, and calls
// cancel (the handlers' contexts) either way. When ctx ends first it hands
// back the running tasks, taken before cancel so that a handler that
// returns at once still counts among them, and gives the cancelled
// handlers drainGrace to return: back is then the number handed back and
// err ctx's error. idle reports whether every execution returned.
func (s *Stage[T, X]) Drain(ctx context.Context, cancel func()) (back int, idle bool, err error) {
	s.fetchers.Wait()
	done := make(chan struct{})
	go func() { s.execs.Wait(); close(done) }()
	select {
	case <-done:
		cancel()
		return 0, true, nil
	case <-ctx.Done():
	}
	running := s.sched.Running()
	cancel()
	for _, p := range running {
		s.HandBack(p, "shutdown deadline")
	}
	s.cfg.Log.Warn("jetflow worker shutdown deadline passed; running tasks handed back", slog.Int("tasks", len(running)))
	grace := time.NewTimer(drainGrace)
	defer grace.Stop()
	select {
	case <-done:
		idle = true
	case <-grace.C:
	}
	return len(running), idle, ctx.Err()
}

// StopBackground stops the sweeper, the acker and the executors, and
// waits for the sweeper and, when idle is true (no handler still
// running), the executors. An executor running an abandoned handler exits
// when the handler returns. Safe to call more than once and when nothing
// was started.
func (s *Stage[T, X]) StopBackground(idle bool) {
	s.beats.Stop()
	if s.pool != nil {
		s.pool.Stop(idle)
	}
	if s.acker != nil {
		// The acks of the executions that returned are on the connection
		// when Shutdown returns; a later one is published by its executor.
		s.acker.Close()
	}
}

// HandBack returns p to the server for immediate redelivery, unless its
// outcome was settled already.
func (s *Stage[T, X]) HandBack(p *Pending[T, X], why string) {
	if !p.Claim() {
		return
	}
	p.LaneSettled(true)
	if err := p.Msg.Nak(); err != nil {
		s.cfg.AckFailed(p, "nak", err)
		return
	}
	s.cfg.Counters.HandedBack.Add(1)
	s.cfg.Log.Debug("jetflow task handed back", slog.String(logKeyTaskType, p.Type.Name), slog.String("reason", why))
}

// Ack acknowledges p's message, the task of stream sequence seq: through
// the acker for the stage's own deliveries (one goroutine writes the
// executors' acks), directly otherwise.
func (s *Stage[T, X]) Ack(p *Pending[T, X], seq uint64) error {
	if pm, ok := p.Msg.(*pull.Msg); ok && s.acker != nil {
		return s.acker.Ack(pm, seq, p)
	}
	return p.Msg.Ack()
}

// Stamp records that an attempt of p started at start: the pulls of lower
// priorities shrink while it competes with them.
func (s *Stage[T, X]) Stamp(p *Pending[T, X], start time.Time) {
	s.lastStart.Stamp(p.Prio.Rank(), start)
}

// NumRunning returns the number of tasks holding a slot.
func (s *Stage[T, X]) NumRunning() int { return s.sched.NumRunning() }

// NumWaiting returns the number of tasks of priority rank waiting for a
// slot.
func (s *Stage[T, X]) NumWaiting(rank int) int { return s.sched.NumWaiting(rank) }
