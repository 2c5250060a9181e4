package framework

import (
	"context"
	"time"

	"github.com/jetflow-io/jetflow/internal/attempt"
	"github.com/jetflow-io/jetflow/internal/exec"
	"github.com/jetflow-io/jetflow/internal/heartbeat"
	"github.com/jetflow-io/jetflow/internal/pull"
)

// Heartbeats and executors: per-worker machinery instead of per-task timers
// and goroutines, which measurably cost throughput (docs/benchmarks.md).
//
// The heartbeat sweeper (internal/heartbeat) sends InProgress for every
// task the worker holds (the dispatcher's set: waiting for a slot or its
// due time, running, held by an open breaker) and for the tasks still in a
// pull buffer (pull.go watches each iterator).
//
// Executors are long-lived goroutines that run dispatched tasks (handed over
// on an unbuffered channel, so only to an idle one), so a task does not pay
// for a new goroutine and its stack growth. When all are busy a task gets a
// goroutine of its own. A task an extension holds is parked and keeps none
// (hold.go).

type background struct {
	pool *exec.Pool[*pending] // the executors (internal/exec)
	// attempts is what they run: every task's attempts
	// (internal/attempt, execute.go).
	attempts *attempt.Executor[*pending]
	beats    heartbeat.Sweeper[*pending]
	// acker writes the executors' plain acks from one goroutine
	// (internal/pull.Acker); nil before Start.
	acker *pull.Acker[*pending]
}

func (w *Worker) startBackground() {
	var hbs []time.Duration
	for _, tt := range w.order {
		hbs = append(hbs, tt.cfg.heartbeat)
	}
	w.bg.beats.Start(heartbeat.Tick(hbs...), w.sched.Each, func(p *pending, err error) {
		w.ackFailed(context.Background(), nil, p, "in_progress", err)
	})
	w.bg.acker = pull.NewAcker(w.nc, func(p *pending, err error) {
		w.ackFailed(context.Background(), nil, p, "ack", err)
	})
	w.bg.pool.Start(w.opts.concurrency)
}

// stopBackground stops the sweeper and the executors and waits for the
// sweeper and, when idle is true (no handler still running), the executors.
// An executor running an abandoned handler exits when the handler returns.
// Safe to call more than once and when nothing was started.
func (w *Worker) stopBackground(idle bool) {
	w.bg.beats.Stop()
	w.bg.pool.Stop(idle)
	if w.bg.acker != nil {
		// The acks of the executions that returned are on the connection
		// when Shutdown returns; a later one is published by its executor.
		w.bg.acker.Close()
	}
}

// Clock, InProgress and Beaten are p's side of the heartbeat sweeper
// (heartbeat.Task).
func (p *pending) Clock() (time.Duration, int64, bool) {
	return p.tt.cfg.heartbeat, p.lastBeat.Load(), p.settled.Load()
}
func (p *pending) InProgress() error  { return p.msg.InProgress() }
func (p *pending) Beaten(stamp int64) { p.lastBeat.Store(stamp) }
