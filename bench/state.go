package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// ---- drain_state ----

// Task type of the drain_state figure.
const typeDrainState = "bench.drainstate"

// runDrainState measures the drain with task state tracking on: the client
// writes a "pending" record per task at enqueue (not timed, like the rest
// of the pre-enqueue), and the worker, with its defaults, a "succeeded"
// record (its "running" record is due only after a second). The clock stops when the last task is acknowledged and every
// record the worker wrote is stored (asynchronous writes are not allowed to
// trail behind). The raw side is the drain figure's. It alternates the
// sides -runs times and prints the medians:
//
//	RESULT drain_state raw_per_s=… jetflow_per_s=… ratio=… untracked_per_s=… n=… runs=…
//
// untracked_per_s is jetflow's drain with state tracking off, measured in
// the same rounds, so the cost of tracking is jetflow_per_s/untracked_per_s.
func (e *env) runDrainState(ctx context.Context, out io.Writer) error {
	if err := framework.EnsureBuckets(ctx, e.js); err != nil {
		return err
	}
	var rawRates, onRates, offRates []float64
	for r := 1; r <= e.cfg.runs; r++ {
		rr, err := e.drainRaw(ctx)
		if err != nil {
			return fmt.Errorf("raw run %d: %w", r, err)
		}
		on, err := e.drainStateJetflow(ctx, true)
		if err != nil {
			return fmt.Errorf("tracked run %d: %w", r, err)
		}
		off, err := e.drainStateJetflow(ctx, false)
		if err != nil {
			return fmt.Errorf("untracked run %d: %w", r, err)
		}
		e.progress("drain_state run %d/%d raw %8.0f/s, tracked %8.0f/s (ratio %.3f), untracked %8.0f/s",
			r, e.cfg.runs, rr, on, on/rr, off)
		rawRates, onRates, offRates = append(rawRates, rr), append(onRates, on), append(offRates, off)
	}
	mr, mon, moff := median(rawRates), median(onRates), median(offRates)
	ratio := 0.0
	if mr > 0 {
		ratio = mon / mr
	}
	printResult(out, "drain_state", frate("raw_per_s", mr), frate("jetflow_per_s", mon), fratio("ratio", ratio),
		frate("untracked_per_s", moff), fint("n", e.cfg.n), fint("runs", e.cfg.runs))
	return nil
}

// drainStateJetflow pre-enqueues n tasks and times their drain by a worker,
// both with state tracking on or off. With tracking on the clock starts
// once the client's "pending" records are stored and stops once the
// worker's "running" and "succeeded" records are.
func (e *env) drainStateJetflow(ctx context.Context, tracked bool) (float64, error) {
	n := e.cfg.n
	seq, err := e.stateLastSeq(ctx)
	if err != nil {
		return 0, err
	}
	nc, err := e.connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, framework.WithMaxPending(e.cfg.window), framework.WithStateTracking(tracked))
	if err != nil {
		return 0, err
	}
	jobs := make([]framework.Job, n)
	for i := range jobs {
		jobs[i] = framework.Job{Type: typeDrainState, Payload: e.payload}
	}
	if _, err := cl.EnqueueMany(ctx, jobs); err != nil {
		return 0, fmt.Errorf("bench: pre-enqueue: %w", err)
	}
	if tracked {
		seq += uint64(n) // one "pending" record per task
		if err := e.waitStateSeq(ctx, seq, "the pending records"); err != nil {
			return 0, err
		}
		// One "succeeded" record per task; no-op tasks end long before
		// their "running" record would be due.
		seq += uint64(n)
	}

	var done atomic.Int64
	finished := make(chan struct{})
	w, stop, err := e.newWorker(framework.WithStateTracking(tracked), framework.WithHooks(framework.Hooks{
		Succeeded: func(*framework.Task, time.Duration) {
			if done.Add(1) == int64(n) {
				close(finished)
			}
		},
	}))
	if err != nil {
		return 0, err
	}
	w.HandleFunc(typeDrainState, func(context.Context, *framework.Task) error { return nil })
	consumer := e.names.ConsumerName(typeDrainState, streams.PriorityNormal)
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return 0, err
	}
	unwatch := e.watch(&done, consumer)
	werr := e.waitFor(ctx, finished, "the tracked drain")
	if werr == nil && tracked {
		werr = e.waitStateSeq(ctx, seq, "the worker's state records")
	}
	elapsed := time.Since(start)
	unwatch()
	if err := errors.Join(werr, stop()); err != nil {
		return 0, err
	}
	if s := w.Stats(); s.AckErrors > 0 {
		return 0, fmt.Errorf("bench: %d jetflow acks failed", s.AckErrors)
	}
	if err := e.waitConsumerEmpty(ctx, consumer); err != nil {
		return 0, err
	}
	return float64(n) / elapsed.Seconds(), nil
}

// stateLastSeq returns the last sequence of the state bucket's stream: the
// number of records written so far.
func (e *env) stateLastSeq(ctx context.Context) (uint64, error) {
	s, err := e.js.Stream(ctx, "KV_"+e.names.StateBucket())
	if err != nil {
		return 0, fmt.Errorf("bench: state bucket: %w", err)
	}
	return s.CachedInfo().State.LastSeq, nil
}

// waitStateSeq waits until the state bucket's stream reached sequence seq.
func (e *env) waitStateSeq(ctx context.Context, seq uint64, what string) error {
	deadline := time.Now().Add(e.cfg.timeout)
	for {
		last, err := e.stateLastSeq(ctx)
		if err != nil {
			return err
		}
		if last >= seq {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: timed out waiting for %s: state stream at %d, want %d", what, last, seq)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}
