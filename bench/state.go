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

// stateMode selects the state tracking of one drain_state drain.
type stateMode int

const (
	stateOff     stateMode = iota // no state tracking (the default)
	stateDefault                  // the worker tracks state, the client does not
	statePending                  // the client also writes "pending" records
)

// runDrainState measures the drain with task state tracking on
// (WithStateTracking(true) on the worker): one "succeeded" record per task
// (a "running" record is due only after a task ran for a second, which
// no-op tasks never do).
// The clock stops when the last task is acknowledged and every record the
// worker wrote is stored: asynchronous writes may not trail behind. The
// raw side is the drain figure's. Sides alternate -runs times and the
// medians are printed:
//
//	RESULT drain_state raw_per_s=… jetflow_per_s=… ratio=… pending_per_s=… untracked_per_s=… raw_ratio=… n=… runs=…
//
// ratio is the cost of tracking (issue 12): the median of the rounds'
// tracked/untracked rates, each pair measured a few seconds apart;
// raw_ratio is tracked over raw (medians); tracked_cpu_us and
// untracked_cpu_us are the process's CPU time per task of the two drains
// (steadier than rates on a shared machine).
// jetflow_per_s is the worker's tracking; pending_per_s adds the client's
// "pending" record per task (written at enqueue, before the clock starts,
// so it only weighs on the drain as a record the worker then replaces);
// untracked_per_s has tracking off. All are measured in the same rounds.
func (e *env) runDrainState(ctx context.Context, out io.Writer) error {
	if err := framework.EnsureBuckets(ctx, e.js); err != nil {
		return err
	}
	var raw, def, pend, off, ratios, defCPU, offCPU []float64
	for r := 1; r <= e.cfg.runs; r++ {
		rr, err := e.drainRaw(ctx)
		if err != nil {
			return fmt.Errorf("raw run %d: %w", r, err)
		}
		d, dcpu, err := e.drainStateJetflow(ctx, stateDefault)
		if err != nil {
			return fmt.Errorf("tracked run %d: %w", r, err)
		}
		p, _, err := e.drainStateJetflow(ctx, statePending)
		if err != nil {
			return fmt.Errorf("tracked run with pending records %d: %w", r, err)
		}
		o, ocpu, err := e.drainStateJetflow(ctx, stateOff)
		if err != nil {
			return fmt.Errorf("untracked run %d: %w", r, err)
		}
		e.progress("drain_state run %d/%d raw %8.0f/s, tracked %8.0f/s (ratio to untracked %.3f), with pending %8.0f/s, untracked %8.0f/s",
			r, e.cfg.runs, rr, d, d/o, p, o)
		raw, def, pend, off = append(raw, rr), append(def, d), append(pend, p), append(off, o)
		ratios = append(ratios, d/o)
		defCPU, offCPU = append(defCPU, dcpu.Seconds()*1e6), append(offCPU, ocpu.Seconds()*1e6)
	}
	mr, md := median(raw), median(def)
	rawRatio := 0.0
	if mr > 0 {
		rawRatio = md / mr
	}
	printResult(out, "drain_state", frate("raw_per_s", mr), frate("jetflow_per_s", md), fratio("ratio", median(ratios)),
		frate("pending_per_s", median(pend)), frate("untracked_per_s", median(off)), fratio("raw_ratio", rawRatio),
		fcpu("tracked_cpu_us", median(defCPU)), fcpu("untracked_cpu_us", median(offCPU)),
		fint("n", e.cfg.n), fint("runs", e.cfg.runs))
	return nil
}

// drainStateJetflow pre-enqueues n tasks and times their drain by a worker
// with the given state tracking. With tracking on, the clock stops once the
// worker's records are stored too. It returns the rate and the process's
// CPU time per task.
func (e *env) drainStateJetflow(ctx context.Context, mode stateMode) (float64, time.Duration, error) {
	n := e.cfg.n
	seq, err := e.stateLastSeq(ctx)
	if err != nil {
		return 0, 0, err
	}
	nc, err := e.connect()
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, framework.WithMaxPending(e.cfg.window), framework.WithStateTracking(mode == statePending))
	if err != nil {
		return 0, 0, err
	}
	jobs := make([]framework.TaskSpec, n)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: typeDrainState, Payload: e.payload}
	}
	if _, err := cl.EnqueueMany(ctx, jobs); err != nil {
		return 0, 0, fmt.Errorf("bench: pre-enqueue: %w", err)
	}
	if mode == statePending {
		seq += uint64(n) // one "pending" record per task
		if err := e.waitStateSeq(ctx, seq, "the pending records"); err != nil {
			return 0, 0, err
		}
	}
	if mode != stateOff {
		seq += uint64(n) // one "succeeded" record per task
	}

	var done atomic.Int64
	finished := make(chan struct{})
	w, stop, err := e.newWorker(framework.WithStateTracking(mode != stateOff), framework.WithHooks(framework.Hooks{
		Finished: func(_ context.Context, _ *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionAck && done.Add(1) == int64(n) {
				close(finished)
			}
		},
	}))
	if err != nil {
		return 0, 0, err
	}
	w.HandleFunc(typeDrainState, func(context.Context, *framework.Task) error { return nil })
	if err := e.ensureWorkerConsumers(ctx, typeDrainState); err != nil {
		_ = stop()
		return 0, 0, err
	}
	consumer := e.names.ConsumerName(typeDrainState, streams.PriorityNormal)
	prof := startTimedProfile()
	start, cpu0 := time.Now(), processCPU()
	if err := w.Start(ctx); err != nil {
		stopTimedProfile(prof)
		_ = stop()
		return 0, 0, err
	}
	unwatch := e.watch(&done, consumer)
	werr := e.waitFor(ctx, finished, "the drain")
	if werr == nil && mode != stateOff {
		werr = e.waitStateSeq(ctx, seq, "the worker's state records")
	}
	elapsed, cpu := time.Since(start), processCPU()-cpu0
	stopTimedProfile(prof)
	unwatch()
	if err := errors.Join(werr, stop()); err != nil {
		return 0, 0, err
	}
	if s := w.Stats(); s.AckErrors > 0 {
		return 0, 0, fmt.Errorf("bench: %d jetflow acks failed", s.AckErrors)
	}
	if err := e.waitConsumerEmpty(ctx, consumer); err != nil {
		return 0, 0, err
	}
	return float64(n) / elapsed.Seconds(), cpu / time.Duration(n), nil
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
