package framework

import (
	"context"
	"sync"
	"time"
)

// Heartbeats and executors: per-worker machinery instead of per-task timers
// and goroutines, which measurably cost throughput (docs/benchmarks.md).
//
// One sweeper goroutine sends InProgress for every task the worker holds —
// waiting for a slot, waiting for its due time, running, or held by an open
// breaker, or still in a pull buffer (pullbeat.go) — once the next sweep
// would come later than the type's heartbeat interval after the previous
// signal. The interval between two signals of a task is therefore within
// (heartbeat − tick, heartbeat].
//
// Executors are long-lived goroutines that run dispatched tasks (handed over
// on an unbuffered channel, so only to an idle one), so a task
// does not pay for a new goroutine and its stack growth. When all are busy
// (tasks held aside by a breaker keep theirs) a task gets a goroutine of its
// own.

type background struct {
	execCh  chan *pending
	stop    chan struct{}
	once    sync.Once
	sweeper sync.WaitGroup
	execs   sync.WaitGroup
	tick    time.Duration
}

// Bounds of the sweep interval: a quarter of the shortest heartbeat.
const (
	minSweep = 5 * time.Millisecond
	maxSweep = time.Second
)

func (w *Worker) startBackground() {
	tick := maxSweep
	for _, tt := range w.order {
		tick = min(tick, tt.cfg.heartbeat/4)
	}
	w.bg.tick = max(tick, minSweep)
	w.bg.sweeper.Add(1)
	go w.sweep()
	for range w.opts.concurrency {
		w.bg.execs.Add(1)
		go w.executor()
	}
}

// stopBackground stops the sweeper and the executors and waits for the
// sweeper and, when idle is true (no handler still running), the executors.
// An executor running an abandoned handler exits when the handler returns.
// Safe to call more than once and when nothing was started.
func (w *Worker) stopBackground(idle bool) {
	w.bg.once.Do(func() { close(w.bg.stop) })
	w.bg.sweeper.Wait()
	if idle {
		w.bg.execs.Wait()
	}
}

func (w *Worker) executor() {
	defer w.bg.execs.Done()
	for {
		select {
		case p := <-w.bg.execCh:
			w.run(p)
		case <-w.bg.stop:
			return
		}
	}
}

func (w *Worker) sweep() {
	defer w.bg.sweeper.Done()
	t := time.NewTicker(w.bg.tick)
	defer t.Stop()
	var due []*pending
	for {
		select {
		case <-w.bg.stop:
			return
		case now := <-t.C:
			due = w.dueForBeat(now, due[:0])
			stamp := now.UnixNano()
			for _, p := range due {
				if p.settled.Load() {
					continue
				}
				if err := p.msg.InProgress(); err != nil {
					w.ackFailed(context.Background(), nil, p, "in_progress", err)
					continue
				}
				p.lastBeat.Store(stamp)
			}
			clear(due)
			w.pulls.beat(now, w.bg.tick) // the pull buffers: pullbeat.go
		}
	}
}

// dueForBeat appends the held tasks whose next heartbeat cannot wait for the
// next sweep.
func (w *Worker) dueForBeat(now time.Time, out []*pending) []*pending {
	next := now.Add(w.bg.tick).UnixNano()
	isDue := func(p *pending) bool {
		return next-p.lastBeat.Load() > int64(p.tt.cfg.heartbeat)
	}
	w.sched.Each(func(p *pending) {
		if isDue(p) {
			out = append(out, p)
		}
	})
	return out
}
