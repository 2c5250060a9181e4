package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/fairness"
	"github.com/jetflow-io/jetflow/framework"
)

// figFairness names the fair shares figure.
const figFairness = "fairness"

// Settings of the fairness figure: a quiet key enqueues fairQuietRate tasks
// per second while a noisy key's backlog drains.
const (
	fairType      = "bench.fair"
	fairQuietRate = 50
	fairProducers = 16
)

// fairRun is one side of the fairness figure.
type fairRun struct {
	enqueueRate float64 // noisy backlog enqueued, tasks/s
	drainRate   float64 // noisy backlog drained, tasks/s
	quietP99    time.Duration
	quiet       int // quiet tasks measured
}

// runFairness measures the fairness figure: cfg.fairBacklog tasks of a
// noisy key enqueued, then a worker started while a quiet key enqueues 50
// tasks/s, each timed from its enqueue to its handler's start, until the
// noisy backlog drained. The fair side enqueues both keys with
// fairness.Enqueue on a type with fairness.Shares; the unfair side, the
// same run without fairness, with Client.Enqueue. It prints the quiet
// key's p99 wait on both sides, and what fairness costs: the enqueue and
// drain rates of the noisy backlog on both sides.
func (e *env) runFairness(ctx context.Context, out io.Writer) error {
	unfair, err := e.fairSide(ctx, false)
	if err != nil {
		return fmt.Errorf("unfair: %w", err)
	}
	fair, err := e.fairSide(ctx, true)
	if err != nil {
		return fmt.Errorf("fair: %w", err)
	}
	fmt.Fprintf(out, "RESULT fairness noisy_backlog=%d quiet_rate_per_s=%d quiet_p99_wait_ms=%.1f unfair_p99_wait_ms=%.1f"+
		" quiet_tasks=%d fair_enqueue_per_s=%.0f plain_enqueue_per_s=%.0f fair_drain_per_s=%.0f plain_drain_per_s=%.0f drain_ratio=%.2f\n",
		e.cfg.fairBacklog, fairQuietRate, ms(fair.quietP99), ms(unfair.quietP99), fair.quiet,
		fair.enqueueRate, unfair.enqueueRate, fair.drainRate, unfair.drainRate, fair.drainRate/unfair.drainRate)
	return nil
}

// fairSide runs one side of the fairness figure, on a fresh task stream.
func (e *env) fairSide(ctx context.Context, fair bool) (fairRun, error) {
	var res fairRun
	if _, err := e.fresh(func(context.Context) (runResult, error) { return runResult{}, nil })(ctx); err != nil {
		return res, err
	}
	nc, err := e.connect()
	if err != nil {
		return res, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, framework.WithStateTracking(false))
	if err != nil {
		return res, err
	}
	enqueue := func(ctx context.Context, key string, v int64) error {
		if fair {
			_, err := fairness.Enqueue(ctx, cl, fairType, v, key)
			return err
		}
		_, err := cl.Enqueue(ctx, fairType, v, framework.WithKey(key))
		return err
	}
	// The noisy backlog, from parallel producers.
	n := e.cfg.fairBacklog
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, fairProducers)
	start := time.Now()
	for range fairProducers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(n) {
					return
				}
				if err := enqueue(ctx, "noisy", i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return res, fmt.Errorf("bench: fairness: enqueue the backlog: %w", err)
	}
	res.enqueueRate = float64(n) / time.Since(start).Seconds()
	e.progress("fairness (fair=%v): %d noisy tasks enqueued at %.0f/s", fair, n, res.enqueueRate)

	// The worker, and the quiet key at fairQuietRate while the backlog drains.
	var mu sync.Mutex
	sent := map[int64]time.Time{}
	var waits []time.Duration
	var noisyDone atomic.Int64
	drained := make(chan struct{})
	w, stop, err := e.newWorker()
	if err != nil {
		return res, err
	}
	defer func() { _ = stop() }()
	var hopts []framework.HandlerOption
	if fair {
		if err := fairness.Install(w); err != nil {
			return res, err
		}
		hopts = append(hopts, fairness.Shares(fairness.Options{}))
	}
	framework.Handle(w, fairType, func(_ context.Context, t *framework.Task, v int64) error {
		if t.Key() == "quiet" {
			now := time.Now()
			mu.Lock()
			if at, ok := sent[v]; ok {
				waits = append(waits, now.Sub(at))
			}
			mu.Unlock()
			return nil
		}
		if noisyDone.Add(1) == int64(n) {
			close(drained)
		}
		return nil
	}, hopts...)
	qctx, qcancel := context.WithCancel(ctx)
	defer qcancel()
	quietErr := make(chan error, 1)
	var quietWG sync.WaitGroup
	quietWG.Go(func() {
		tick := time.NewTicker(time.Second / fairQuietRate)
		defer tick.Stop()
		for i := int64(1); ; i++ {
			select {
			case <-qctx.Done():
				return
			case <-tick.C:
			}
			mu.Lock()
			sent[i] = time.Now()
			mu.Unlock()
			if err := enqueue(qctx, "quiet", i); err != nil && qctx.Err() == nil {
				quietErr <- err
				return
			}
		}
	})
	start = time.Now()
	if err := w.Start(ctx); err != nil {
		qcancel()
		quietWG.Wait()
		return res, err
	}
	err = e.waitFor(ctx, drained, "the noisy backlog to drain")
	res.drainRate = float64(n) / time.Since(start).Seconds()
	qcancel()
	quietWG.Wait()
	if err != nil {
		return res, err
	}
	select {
	case err := <-quietErr:
		return res, fmt.Errorf("bench: fairness: quiet enqueue: %w", err)
	default:
	}
	// Every quiet task sent counts, those still behind the backlog's tail
	// too: wait until each started.
	deadline := time.Now().Add(e.cfg.timeout)
	for {
		mu.Lock()
		all := len(waits) >= len(sent)
		mu.Unlock()
		if all {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("bench: fairness: quiet tasks not started within %v", e.cfg.timeout)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(10 * time.Millisecond): // polling the handler's record, not synchronising
		}
	}
	mu.Lock()
	defer mu.Unlock()
	res.quiet = len(waits)
	res.quietP99 = percentile(waits, 99)
	e.progress("fairness (fair=%v): backlog drained at %.0f/s; %d quiet tasks started, p99 wait %v (%s sent)",
		fair, res.drainRate, len(waits), res.quietP99.Round(time.Millisecond), strconv.Itoa(len(sent)))
	return res, nil
}
