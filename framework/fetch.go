package framework

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fetch"
	"github.com/jetflow-io/jetflow/internal/pull"
)

// Fetching: one goroutine per (type, priority) consumer, a fetcher
// (internal/fetch), pulls messages and offers them to the worker's
// scheduler (internal/dispatch), which starts them on executors
// (heartbeats.go) as slots free up. Two direct paths skip the fetch loop
// while nothing waits for a slot: a message that reaches an empty pull
// buffer while a slot is free starts from the subscription (startDirect),
// and an executor that settled a task takes the next one from its buffer
// (takeBuffered).

// fetch runs the fetcher of one (type, priority) consumer
// (internal/fetch) until the worker stops fetching.
func (w *Worker) fetch(s consumerSub) {
	if s.lane {
		w.runLane(s) // lanes.go
		return
	}
	defer w.fetchers.Done()
	log := w.log.With(slog.String(LogKeyTaskType, s.tt.name), slog.String(LogKeyPriority, s.prio.String()))
	fetch.New[*pending](&fetchSide{w: w, s: s}, fetch.Config{
		Consumer: s.cons,
		Loop:     w.health.Loop(w.names.ConsumerName(s.tt.name, s.prio)),
		Log:      log,
		AckWait:  s.tt.cfg.ackWait,
	}).Run(w.stopFetch)
}

// fetchSide is what the fetcher of consumer s needs from the worker
// ([fetch.Worker]): one per fetcher, so that no call on the fetch path
// allocates.
type fetchSide struct {
	w *Worker
	s consumerSub
}

var _ fetch.Worker[*pending] = (*fetchSide)(nil)

// Open and Close are in pull.go; the methods below are fetch.Worker's.

// Ensure re-creates the consumer after a failed pull.
func (f *fetchSide) Ensure(ctx context.Context) (jetstream.Consumer, error) { return f.s.ensure(ctx) }

// Pending returns the pending task of msg, of the fetcher's feed src (nil
// for a rescued buffer's task).
func (f *fetchSide) Pending(msg jetstream.Msg, src *feed) *pending {
	p := newPending(f.s.tt, f.s.prio, msg)
	p.src = src
	return p
}

// Offer queues p for a slot (offer).
func (f *fetchSide) Offer(p *pending) { f.w.offer(p) }

// Dispatched receives once p got a slot (granted, taken).
func (f *fetchSide) Dispatched(p *pending) <-chan struct{} { return p.dispatched }

// Withdraw takes p out of the waiting tasks (withdraw).
func (f *fetchSide) Withdraw(p *pending) bool { return f.w.withdraw(p) }

// HandBack returns p to the server (handBack).
func (f *fetchSide) HandBack(p *pending, why string) { f.w.handBack(p, why) }

// HandBackBuffered naks msg, left in a stopping fetcher's buffer, and
// counts it.
func (f *fetchSide) HandBackBuffered(msg jetstream.Msg) {
	if err := msg.Nak(); err != nil {
		f.w.stats.ackErrors.Add(1)
		f.w.log.Warn("jetflow could not hand back a buffered task; it will be redelivered after its ack wait",
			slog.Any(LogKeyError, err))
		return
	}
	f.w.stats.HandedBack.Add(1)
}

// newPending returns the pending task of msg, fetched from a consumer of
// (tt, prio), to be offered to the scheduler.
func newPending(tt *typeRunner, prio Priority, msg jetstream.Msg) *pending {
	p := &pending{tt: tt, prio: prio, msg: msg, dispatched: make(chan struct{}, 1)}
	var beat time.Time
	if pm, ok := msg.(*pull.Msg); ok {
		// Its ack clock runs from its arrival or last heartbeat in the
		// pull buffer (internal/heartbeat), not from now.
		beat = pm.LastBeat()
	}
	if beat.IsZero() {
		beat = time.Now()
	}
	p.lastBeat.Store(beat.UnixNano())
	return p
}

// offer queues p for a slot; granted starts it.
func (w *Worker) offer(p *pending) { w.sched.Offer(p, p.prio.Rank(), p.tt.slots) }

// withdraw removes p from the waiting tasks; false if it was dispatched.
func (w *Worker) withdraw(p *pending) bool { return w.sched.Withdraw(p, p.prio.Rank()) }

// granted is called by the scheduler, under its lock, when p gets a slot:
// a parked task resumes (hold.go), a fetched one starts.
func (w *Worker) granted(p *pending, resumed bool) {
	if !resumed {
		p.dispatched <- struct{}{}
	}
	w.execute(p, !resumed)
}

// execute is the one way of a task into execution: p, which holds a slot,
// runs on an idle executor (heartbeats.go) or a goroutine of its own, in
// the executor's loop (attempt.Executor.Run), which then runs the tasks
// that follow it in the same goroutine (takeBuffered, releaseNext, park).
// A fresh task is counted in execs first; a parked one resuming still is.
func (w *Worker) execute(p *pending, fresh bool) {
	if fresh {
		w.execs.Add(1)
	}
	w.bg.pool.Run(p)
}

// bufferedPending returns the pending task of m, taken from the pull buffer
// that f publishes, with the heartbeat stamp m got there.
func bufferedPending(tt *typeRunner, prio Priority, m *pull.Msg, f *feed) *pending {
	p := &pending{tt: tt, prio: prio, msg: m, src: f}
	p.lastBeat.Store(m.LastBeat().UnixNano())
	return p
}

// feed publishes a fetcher's live pull iterator to the executors running
// its tasks.
type feed = fetch.Feed

// takeBuffered is the direct path from a pull buffer to an executor: when
// p's execution is over, no task waits for a slot that p's could serve and
// the worker runs, the next message of the buffer p came from starts in
// p's slot and goroutine (nil when there is none). Without it every task
// crosses the fetcher and the scheduler to an idle executor: two goroutine
// wake-ups per task. The rules are the fetcher's: a waiting task (a
// higher priority, a rescued buffer, a held task resuming) goes first; a
// draining or stopped buffer gives nothing; and the message is taken only
// once the slot is settled, else it goes back to the head of its buffer,
// where its heartbeats continue.
func (w *Worker) takeBuffered(p *pending) *pending {
	f := p.src
	if f == nil || w.state.Load() != workerRunning {
		return nil
	}
	it := f.Iter()
	if it == nil || w.sched.Contended(p.tt.slots) {
		return nil
	}
	m := it.TryNext()
	if m == nil {
		return nil
	}
	q := bufferedPending(p.tt, p.prio, m, f)
	if w.sched.Swap(p, q, p.tt.slots) {
		return q
	}
	if !it.Unget(m) {
		w.handBack(q, "pull buffer stopped")
	}
	return nil
}

// startDirect returns the direct path of a pull buffer of (tt, prio)
// ([pull.Iter.SetDirect]): a task that arrives at an empty buffer while the
// worker runs, a slot is free for it and no task waits that could take the
// slot starts at once on an idle executor, from the subscription's
// goroutine. Without it the task wakes the fetch loop, which offers it to
// the scheduler, which wakes an executor: one goroutine hand-off more
// between the server and the handler for every task that finds a free slot.
// The rules are takeBuffered's: a waiting task (a higher priority, a
// rescued buffer, a held task resuming) goes first, and a draining or
// stopped buffer gives nothing (the iterator checks; its Drain and Stop wait
// for a call in progress, so a stopping fetcher's hand-back never misses a
// task started here, and the start counts in execs before Shutdown waits on
// them).
func (w *Worker) startDirect(tt *typeRunner, prio Priority, f *feed) func(*pull.Msg) bool {
	return func(m *pull.Msg) bool {
		if w.state.Load() != workerRunning {
			return false
		}
		p, ok := w.sched.StartNew(tt.slots, func() *pending { return bufferedPending(tt, prio, m, f) })
		if !ok {
			return false
		}
		w.stats.startedDirect.Add(1)
		w.execute(p, true)
		return true
	}
}

// releaseNext gives back p's slot and returns the fetched task granted the
// slot in its place, if any, for the caller to run (granted's work for it
// is done here, outside the scheduler's lock).
func (w *Worker) releaseNext(p *pending) *pending {
	next, ok := w.sched.ReleaseTake(p, p.tt.slots)
	next = w.taken(next, ok) // before Done: the count never touches zero between them
	w.execs.Done()
	return next
}

// taken does granted's work for next, a fetched task the scheduler handed
// to the caller (ok) to run in its own goroutine; nil when there is none.
func (w *Worker) taken(next *pending, ok bool) *pending {
	if !ok {
		return nil
	}
	w.execs.Add(1)
	next.dispatched <- struct{}{}
	return next
}
