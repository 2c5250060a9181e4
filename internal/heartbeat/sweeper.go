package heartbeat

import (
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/internal/pull"
)

// Task is a held task as the sweeper sees it.
type Task interface {
	// Clock returns the heartbeat interval of the task's type, when the
	// server last heard of its delivery (Unix nanoseconds), and whether its
	// outcome is settled (it needs no more heartbeats).
	Clock() (every time.Duration, last int64, settled bool)
	// InProgress sends the heartbeat.
	InProgress() error
	// Beaten records a heartbeat sent at stamp (Unix nanoseconds).
	Beaten(stamp int64)
}

// Bounds of the sweep interval: a quarter of the shortest heartbeat.
const (
	minTick = 5 * time.Millisecond
	maxTick = time.Second
)

// Tick returns the sweep interval for tasks with the given heartbeat
// intervals: a quarter of the shortest, within 5 ms and 1 s.
func Tick(heartbeats ...time.Duration) time.Duration {
	tick := maxTick
	for _, hb := range heartbeats {
		tick = min(tick, hb/4)
	}
	return max(tick, minTick)
}

// Sweeper sends the heartbeats of a worker's held tasks of type T and of
// its pull iterators' queues. The zero value is ready for [Sweeper.Watch];
// [Sweeper.Start] starts the sweeps. It is safe for concurrent use.
type Sweeper[T Task] struct {
	mu    sync.Mutex
	iters map[*pull.Iter]queue
	stop  chan struct{}
	once  sync.Once
	done  sync.WaitGroup
}

// queue is a watched pull iterator's heartbeat interval and what to do when
// a heartbeat of its queue cannot be sent.
type queue struct {
	every  time.Duration
	failed func(*pull.Msg, error)
}

// Start starts sweeping every tick: each calls its argument with every
// task the worker holds, and failed reports a heartbeat that could not be
// sent. Call it once.
func (s *Sweeper[T]) Start(tick time.Duration, each func(func(T)), failed func(T, error)) {
	s.mu.Lock()
	s.stop = make(chan struct{})
	s.mu.Unlock()
	s.done.Add(1)
	go s.sweep(tick, s.stop, each, failed)
}

// Stop stops the sweeps and waits for the sweeper to return. It is safe to
// call more than once and without Start.
func (s *Sweeper[T]) Stop() {
	s.mu.Lock()
	stop := s.stop
	s.mu.Unlock()
	if stop != nil {
		s.once.Do(func() { close(stop) })
	}
	s.done.Wait()
}

func (s *Sweeper[T]) sweep(tick time.Duration, stop <-chan struct{}, each func(func(T)), failed func(T, error)) {
	defer s.done.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	var due []T
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			next := now.Add(tick).UnixNano()
			each(func(p T) {
				if every, last, _ := p.Clock(); next-last > int64(every) {
					due = append(due, p)
				}
			})
			stamp := now.UnixNano()
			for _, p := range due {
				if _, _, settled := p.Clock(); settled {
					continue
				}
				if err := p.InProgress(); err != nil {
					failed(p, err)
					continue
				}
				p.Beaten(stamp)
			}
			clear(due)
			due = due[:0]
			s.beatQueues(now, next)
		}
	}
}

// Watch adds it to the iterators whose queues the sweeper beats, with the
// heartbeat interval of its type; failed reports a heartbeat that could
// not be sent.
func (s *Sweeper[T]) Watch(it *pull.Iter, every time.Duration, failed func(*pull.Msg, error)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.iters == nil {
		s.iters = make(map[*pull.Iter]queue)
	}
	s.iters[it] = queue{every, failed}
}

// Unwatch ends the heartbeats of it's queue.
func (s *Sweeper[T]) Unwatch(it *pull.Iter) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.iters, it)
}

// beatQueues heartbeats the queues of all watched iterators (see
// [pull.Iter.BeatQueued]) whose next heartbeat cannot wait until next.
func (s *Sweeper[T]) beatQueues(now time.Time, next int64) {
	s.mu.Lock()
	type entry struct {
		it *pull.Iter
		queue
	}
	iters := make([]entry, 0, len(s.iters))
	for it, q := range s.iters {
		iters = append(iters, entry{it, q})
	}
	s.mu.Unlock()
	for _, e := range iters {
		e.it.BeatQueued(now, next, e.every, e.failed)
	}
}
