package intake

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fetch"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Fetching: one goroutine per (type, priority) consumer, a fetcher
// (internal/fetch), pulls messages with the worker's own pull requests
// (internal/pull explains why) and offers them to the scheduler; the
// direct paths (direct.go) skip it while nothing waits.

// fetch runs the fetcher of src (a lane's runner for a lane) until Stop.
func (s *Stage[T, X]) fetch(src Source[T]) {
	defer s.fetchers.Done()
	if src.Lane {
		s.runLane(src) // lanes.go
		return
	}
	log := s.cfg.Log.With(slog.String(logKeyTaskType, src.Type.Name), slog.String(logKeyPriority, src.Prio.String()))
	fetch.New[*Pending[T, X]](&fetchSide[T, X]{s: s, src: src}, fetch.Config{
		Consumer: src.Cons,
		Loop:     s.cfg.Loops.Loop(s.cfg.Names.ConsumerName(src.Type.Name, src.Prio)),
		Log:      log,
		AckWait:  src.Type.AckWait,
	}).Run(s.stop)
}

// fetchSide is what the fetcher of src needs from the stage
// ([fetch.Worker]): one per fetcher, so that no call on the fetch path
// allocates.
type fetchSide[T, X any] struct {
	s   *Stage[T, X]
	src Source[T]
}

// Open opens a pull iterator on cons, sized by pullSize, counting lost
// pull requests and reporting them. Tasks it starts directly
// (startDirect) continue from feed; the sweeper beats the rest while they
// wait.
func (f *fetchSide[T, X]) Open(cons jetstream.Consumer, feed *fetch.Feed) (*pull.Iter, error) {
	s, t, prio := f.s, f.src.Type, f.src.Prio
	info := cons.CachedInfo()
	size := func() int { return s.PullSize(t, prio, time.Now()) }
	it, err := pull.NewIter(s.cfg.Conn, info.Stream, info.Name, size, func() {
		s.cfg.Counters.PullsLost.Add(1)
		s.cfg.Log.Warn("jetflow pull request lost; replaced", slog.String(logKeyTaskType, t.Name),
			slog.String(logKeyPriority, prio.String()))
		s.cfg.PullLost(t.Name, prio)
	})
	if err != nil {
		return nil, err
	}
	it.SetDirect(s.startDirect(t, prio, feed))
	s.watch(it, t, prio)
	return it, nil
}

// watch has the sweeper beat the messages in it's buffer.
func (s *Stage[T, X]) watch(it *pull.Iter, t *Type[T], prio streams.Priority) {
	s.beats.Watch(it, t.Heartbeat, func(m *pull.Msg, err error) {
		s.cfg.AckFailed(newPending[T, X](t, prio, m), "in_progress", err)
	})
}

// Close stops it, handing back what it still buffers, and ends its
// heartbeats.
func (f *fetchSide[T, X]) Close(it *pull.Iter) {
	it.Stop()
	f.s.beats.Unwatch(it)
}

// Ensure re-creates the consumer after a failed pull.
func (f *fetchSide[T, X]) Ensure(ctx context.Context) (jetstream.Consumer, error) {
	return f.src.Ensure(ctx)
}

// Pending returns the pending task of msg, of the fetcher's feed (nil for
// a rescued buffer's task).
func (f *fetchSide[T, X]) Pending(msg jetstream.Msg, feed *fetch.Feed) *Pending[T, X] {
	p := newPending[T, X](f.src.Type, f.src.Prio, msg)
	p.src = feed
	return p
}

// Offer queues p for a slot.
func (f *fetchSide[T, X]) Offer(p *Pending[T, X]) { f.s.offer(p) }

// Dispatched receives once p got a slot (granted, taken).
func (f *fetchSide[T, X]) Dispatched(p *Pending[T, X]) <-chan struct{} { return p.dispatched }

// Withdraw takes p out of the waiting tasks.
func (f *fetchSide[T, X]) Withdraw(p *Pending[T, X]) bool { return f.s.Withdraw(p) }

// HandBack returns p to the server.
func (f *fetchSide[T, X]) HandBack(p *Pending[T, X], why string) { f.s.HandBack(p, why) }

// HandBackBuffered naks msg, left in a stopping fetcher's buffer, and
// counts it.
func (f *fetchSide[T, X]) HandBackBuffered(msg jetstream.Msg) {
	c := &f.s.cfg.Counters
	if err := msg.Nak(); err != nil {
		c.AckErrors.Add(1)
		f.s.cfg.Log.Warn("jetflow could not hand back a buffered task; it will be redelivered after its ack wait",
			slog.Any(logKeyError, err))
		return
	}
	c.HandedBack.Add(1)
}

// Pull sizing: how many tasks a fetcher asks the server for at once
// ([pull.Batch] of the handler times a [pull.Pace] measures; smaller while
// higher priorities wait for slots or started tasks within
// [pull.CompeteWindow], [pull.Starts]).

// PullSize returns the batch a fetcher of t at prio should pull at now. It
// counts a resize when the size differs from the previous request's.
func (s *Stage[T, X]) PullSize(t *Type[T], prio streams.Priority, now time.Time) int {
	if t.PrefetchSet {
		return t.Prefetch
	}
	inFlight := t.MaxInFlight
	if inFlight == 0 {
		inFlight = topology.DefaultMaxAckPending
	}
	competing := s.higherWaiting(prio) || s.lastStart.HigherRan(prio.Rank(), now)
	batch := pull.Batch(t.Prefetch, t.Concurrency, inFlight, t.Pace.Average(), competing)
	t.Pace.LastBatch(batch)
	return batch
}

// higherWaiting reports whether tasks of a higher priority than prio wait
// for a slot on this worker.
func (s *Stage[T, X]) higherWaiting(prio streams.Priority) bool {
	for r := range prio.Rank() {
		if s.sched.NumWaiting(r) > 0 {
			return true
		}
	}
	return false
}
