package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// ---- priority ----

func (e *env) figurePriority(ctx context.Context, out io.Writer) error {
	var p99s []float64
	count := 0
	for r := 1; r <= e.cfg.runs; r++ {
		p50, p99, k, drain, err := e.priorityRun(ctx)
		if err != nil {
			return fmt.Errorf("run %d: %w", r, err)
		}
		e.progress("priority run %d/%d: backlog %d drained in %v; %d critical tasks, p50 %.2f ms, p99 %.2f ms",
			r, e.cfg.runs, e.cfg.backlog, drain.Round(time.Millisecond), k, ms(p50), ms(p99))
		p99s = append(p99s, ms(p99))
		if r == 1 || k < count {
			count = k // the fewest samples of any run
		}
	}
	printResult(out, figPriority, fint("backlog", e.cfg.backlog), fms("critical_p99_ms", median(p99s)),
		fint("critical_min", count), fint("runs", e.cfg.runs))
	return nil
}

// priorityRun enqueues a backlog of low tasks (each busy for cfg.lowWork),
// starts the worker, then enqueues a critical task every cfg.criticalEvery
// until the backlog is drained, and measures the critical tasks'
// enqueue→start latency.
func (e *env) priorityRun(ctx context.Context) (p50, p99 time.Duration, count int, drain time.Duration, err error) {
	backlog := e.cfg.backlog
	if err := e.enqueueJobsClient(ctx, []framework.ClientOption{e.tracking()}, typePriority, backlog, e.payload, framework.WithPriority(framework.PriorityLow)); err != nil {
		return 0, 0, 0, 0, err
	}
	t0 := time.Now()
	rec := newRecorder(1024)
	critical := stampHandler(t0, rec)
	var lowDone atomic.Int64
	lowFinished := make(chan struct{})
	w, stop, err := e.newWorker(e.tracking())
	if err != nil {
		return 0, 0, 0, 0, err
	}
	w.HandleFunc(typePriority, func(ctx context.Context, t *framework.Task) error {
		if t.Priority == framework.PriorityCritical {
			return critical(ctx, t)
		}
		for start := time.Now(); time.Since(start) < e.cfg.lowWork; {
			// Busy: a little CPU work per low task.
		}
		if lowDone.Add(1) == int64(backlog) {
			close(lowFinished)
		}
		return nil
	})
	nc, err := e.connect()
	if err != nil {
		_ = stop()
		return 0, 0, 0, 0, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, e.tracking())
	if err != nil {
		_ = stop()
		return 0, 0, 0, 0, err
	}
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return 0, 0, 0, 0, err
	}
	var sent atomic.Int64
	pctx, cancel := context.WithTimeout(ctx, e.cfg.timeout)
	defer cancel()
	failed := e.paced(pctx, e.cfg.criticalEvery, -1, lowFinished, func() error {
		sent.Add(1)
		return stampedEnqueue(ctx, cl, t0, typePriority, framework.WithPriority(framework.PriorityCritical))
	})
	drain = time.Since(start)
	rec.expect(int(sent.Load()) - failed)
	werr := e.waitFor(ctx, rec.done, "critical tasks")
	if werr == nil {
		werr = e.waitFor(ctx, lowFinished, "the low backlog")
	}
	if err := errors.Join(werr, stop()); err != nil {
		return 0, 0, 0, 0, err
	}
	if failed > 0 {
		return 0, 0, 0, 0, fmt.Errorf("bench: %d critical enqueues failed", failed)
	}
	lats := rec.latencies(0)
	if len(lats) == 0 {
		return 0, 0, 0, drain, fmt.Errorf("bench: the backlog drained before any critical task was sent")
	}
	return percentile(lats, 50), percentile(lats, 99), len(lats), drain, nil
}
