package framework

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/retry"
)

// Fetching: one goroutine per (type, priority) consumer pulls messages and
// offers them to the worker's scheduler (internal/dispatch), which starts
// them on executors (heartbeats.go) as slots free up. Two direct paths skip
// the fetch loop while nothing waits for a slot: a message that reaches an
// empty pull buffer while a slot is free starts from the subscription
// (startDirect), and an executor that settled a task takes the next one from
// its buffer (takeBuffered).

// fetch pulls one (type, priority) consumer and feeds the dispatcher, holding
// at most one message outside the pull buffer at a time.
func (w *Worker) fetch(s consumerSub) {
	defer w.fetchers.Done()
	tt, prio, cons := s.tt, s.prio, s.cons
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
	f := &feed{}
	for {
		it, err := w.newPull(cons, tt, prio, f) // pull.go
		if err == nil {
			f.it.Store(it)
			err = w.serve(stopCtx, tt, prio, it, f)
			f.it.Store(nil)
			if stopCtx.Err() != nil {
				w.drain(it)
				w.closePull(it)
				return
			}
			w.closePull(it)
			if errors.Is(err, errRescued) {
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
		c, err := s.ensure(ectx)
		ecancel()
		if err == nil {
			cons = c
		}
	}
}

// pullRetry spaces the attempts to resume a failed pull.
var pullRetry = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// nextPoll bounds each wait for the next message: it is how soon an idle
// fetcher notices that the worker stops. (Lost pull requests are detected by
// the iterator itself, from missed heartbeats: see pull.go.)
const nextPoll = 250 * time.Millisecond

// serve reads it until stop or a terminal iterator error. f publishes it
// to the executors (takeBuffered).
func (w *Worker) serve(stop context.Context, tt *typeRunner, prio Priority, it *pullIter, f *feed) error {
	errStreak := 0
	lh := w.health.Loop(w.names.ConsumerName(tt.name, prio))
	defer lh.SetBusy(false)
	// One starvation timer for the loop, re-armed per waiting task.
	starve := time.NewTimer(time.Hour)
	starve.Stop()
	defer starve.Stop()
	for {
		msg, err := it.Next(nextPoll)
		if err == nil {
			lh.Poll(it.Polled())
		} else if alive := it.Alive(); !alive.IsZero() {
			lh.Poll(alive) // an empty wait counts if the consumer answers
		}
		if err != nil {
			if stop.Err() != nil {
				return nil
			}
			if errors.Is(err, nats.ErrTimeout) {
				continue // nothing within nextPoll: check for stop
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
		p.src = f
		if stop.Err() != nil {
			// Stopping: start nothing new. Without this check a task handed
			// back at shutdown (a held task) is redelivered at once, given a
			// free slot and run again, round and round, and Shutdown waits
			// on this loop past its deadline.
			w.handBack(p, "worker stopping")
			return nil
		}
		w.offer(p)
		lh.SetBusy(true)
		dispatched, starved := w.awaitSlot(stop, p, starve, tt.cfg.ackWait/2)
		lh.SetBusy(starved) // a rescue waits for slots too
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
	}
}

// errRescued ends serve after its pull buffer was emptied into the waiting
// lists because a task starved (see rescue).
var errRescued = errors.New("framework: pull buffer rescued from starvation")

func (w *Worker) newPending(tt *typeRunner, prio Priority, msg jetstream.Msg) *pending {
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

// awaitSlot waits until p is dispatched (true, false), the worker stops
// (false, false; p was handed back unless dispatched concurrently), or
// starveAfter passes (false, true; p still waits). timer is the loop's
// stopped timer: awaitSlot arms it and leaves it stopped.
func (w *Worker) awaitSlot(stop context.Context, p *pending, timer *time.Timer, starveAfter time.Duration) (dispatched, starved bool) {
	select {
	case <-p.dispatched:
		return true, false
	default:
	}
	// Since Go 1.23 a stopped or reset timer delivers no stale tick.
	timer.Reset(starveAfter)
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
func (w *Worker) rescue(stop context.Context, it *pullIter, tt *typeRunner, prio Priority, held *pending) error {
	it.Drain()
	batch := []*pending{held}
	// Take every message until the drain is through (the subscription
	// closes): one arriving later would be handed back by closePull and
	// spend an attempt. Meanwhile the sweeper beats the queue (internal/heartbeat).
	giveUp := time.Now().Add(tt.cfg.ackWait)
	for {
		msg, err := it.Next(nextPoll)
		if errors.Is(err, nats.ErrTimeout) && stop.Err() == nil && time.Now().Before(giveUp) {
			continue
		}
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
func (w *Worker) drain(it *pullIter) {
	it.Drain()
	for {
		msg, err := it.Next(200 * time.Millisecond)
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

// offer queues p for a slot; granted starts it.
func (w *Worker) offer(p *pending) { w.sched.Offer(p, p.prio.Rank(), p.tt.slots) }

// withdraw removes p from the waiting tasks; false if it was dispatched.
func (w *Worker) withdraw(p *pending) bool { return w.sched.Withdraw(p, p.prio.Rank()) }

// granted is called by the scheduler, under its lock, when p gets a slot:
// a parked task resumes (hold.go), a fetched one starts; either runs on an
// idle executor (heartbeats.go) or a goroutine of its own.
func (w *Worker) granted(p *pending, resumed bool) {
	if resumed {
		w.continueExec(p)
		return
	}
	p.dispatched <- struct{}{}
	w.startExec(p)
}

// startExec runs p, which holds a slot, on an idle executor (heartbeats.go)
// or a goroutine of its own.
func (w *Worker) startExec(p *pending) {
	w.execs.Add(1)
	w.continueExec(p)
}

// continueExec runs p, an execution already counted in execs, like
// startExec.
func (w *Worker) continueExec(p *pending) {
	w.bg.pool.Run(p)
}

// bufferedPending returns the pending task of m, taken from the pull buffer
// that f publishes, with the heartbeat stamp m got there.
func bufferedPending(tt *typeRunner, prio Priority, m *pull.Msg, f *feed) *pending {
	p := &pending{tt: tt, prio: prio, msg: m, src: f}
	p.lastBeat.Store(m.LastBeat().UnixNano())
	return p
}

// feed publishes a fetcher's live pull iterator (nil between iterators) to
// the executors running its tasks.
type feed struct{ it atomic.Pointer[pullIter] }

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
	it := f.it.Load()
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
		w.startExec(p)
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
