package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/streams"
)

// Task types of the ratelimit_cost figure.
const (
	typeRateFree    = "bench.ratefree"
	typeRateLimited = "bench.ratelimited"
)

// runRateLimitCost measures what a cluster-wide rate limit costs when it
// does not bind: a drain of n no-op tasks without a limit, and one with
// ratelimit.WithLimit at 1,000,000 per second (every task still takes a
// permit: one compare-and-set on the limits bucket per batch of waiting
// tasks). Rounds alternate -runs times; medians are printed:
//
//	RESULT ratelimit_cost plain_per_s=… limited_per_s=… ratio=… n=… runs=…
func (e *env) runRateLimitCost(ctx context.Context, out io.Writer) error {
	var plain, limited []float64
	for r := 1; r <= e.cfg.runs; r++ {
		p, err := e.drainType(ctx, typeRateFree)
		if err != nil {
			return err
		}
		l, err := e.drainType(ctx, typeRateLimited, ratelimit.WithLimit(ratelimit.Limit{Limit: 1_000_000}))
		if err != nil {
			return err
		}
		e.progress("ratelimit_cost run %d/%d: plain %8.0f/s, limited %8.0f/s", r, e.cfg.runs, p, l)
		plain, limited = append(plain, p), append(limited, l)
	}
	mp, ml := median(plain), median(limited)
	ratio := 0.0
	if mp > 0 {
		ratio = ml / mp
	}
	printResult(out, figRateLimitCost, frate("plain_per_s", mp), frate("limited_per_s", ml), fratio("ratio", ratio),
		fint("n", e.cfg.n), fint("runs", e.cfg.runs))
	return nil
}

// drainType pre-enqueues n tasks of taskType and times their drain by one
// worker whose handler has opts.
func (e *env) drainType(ctx context.Context, taskType string, opts ...framework.HandlerOption) (float64, error) {
	n := e.cfg.n
	untracked := framework.WithStateTracking(false)
	if err := e.enqueueJobsClient(ctx, []framework.ClientOption{untracked}, taskType, n, e.payload); err != nil {
		return 0, err
	}
	var done atomic.Int64
	finished := make(chan struct{})
	w, stop, err := e.newWorker(untracked, framework.WithHooks(framework.Hooks{
		Finished: func(_ context.Context, _ *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionAck && done.Add(1) == int64(n) {
				close(finished)
			}
		},
	}))
	if err != nil {
		return 0, err
	}
	// Both drains run with the limits installed, so that the ratio is the
	// cost of the limit alone.
	if err := ratelimit.Install(w); err != nil {
		_ = stop()
		return 0, err
	}
	w.HandleFunc(taskType, func(context.Context, *framework.Task) error { return nil }, append(opts, framework.WithPrefetch(e.prefetch()))...)
	tm := startTimer()
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return 0, err
	}
	werr := e.waitFor(ctx, finished, "the drain of "+taskType)
	res := tm.result(n)
	if err := errors.Join(werr, stop()); err != nil {
		return 0, err
	}
	if err := e.waitConsumerEmpty(ctx, e.names.ConsumerName(taskType, streams.PriorityNormal)); err != nil {
		return 0, fmt.Errorf("bench: %w", err)
	}
	return res.rate, nil
}
