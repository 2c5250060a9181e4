package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// orderingPartitions are the partition counts of the ordering figure.
var orderingPartitions = []int{1, 4, 16, 64, 256}

// orderingLanes is the lane count of the ordering figure's lanes column.
const orderingLanes = 16

// orderingKeys is the number of ordering keys of the ordering figure.
const orderingKeys = 1000

// orderingWork is how long each task of the ordering figure waits, like a
// handler calling a service: ordering limits how many wait at once.
const orderingWork = time.Millisecond

// runOrdering measures the drain of n ordered tasks spread over 1,000 keys,
// each waiting 1 ms (I/O, not CPU), for each partition count, with one
// worker (-concurrency slots). Each partition runs one task at a time
// cluster-wide, so throughput grows with partitions until the worker's
// slots or the CPU bind. lanes16 is the same drain with 16 lanes
// (framework.Ordering.Lanes): each lane runs many keys at once, one task
// of a key at a time. Rounds repeat -runs times; medians are printed:
//
//	RESULT ordering keys=1000 p1_per_s=… p4_per_s=… p16_per_s=… p64_per_s=… p256_per_s=… lanes16_per_s=… unordered_per_s=… ratio=… n=… runs=…
//
// unordered_per_s is the same drain without ordering, for comparison;
// ratio is the median over rounds of lanes16 / unordered of the round.
func (e *env) runOrdering(ctx context.Context, out io.Writer) error {
	n := min(e.cfg.n, 10000)
	rates := make(map[int][]float64)
	var plain, laned, ratios []float64
	for r := 1; r <= e.cfg.runs; r++ {
		for _, p := range orderingPartitions {
			rate, err := e.drainOrdered(ctx, n, p, 0)
			if err != nil {
				return fmt.Errorf("%d partitions: %w", p, err)
			}
			rates[p] = append(rates[p], rate)
			e.progress("ordering run %d/%d: %3d partitions %8.0f/s", r, e.cfg.runs, p, rate)
		}
		lrate, err := e.drainOrdered(ctx, n, 0, orderingLanes)
		if err != nil {
			return fmt.Errorf("%d lanes: %w", orderingLanes, err)
		}
		laned = append(laned, lrate)
		e.progress("ordering run %d/%d: %3d lanes      %8.0f/s", r, e.cfg.runs, orderingLanes, lrate)
		rate, err := e.drainOrdered(ctx, n, 0, 0)
		if err != nil {
			return err
		}
		plain = append(plain, rate)
		ratios = append(ratios, lrate/rate)
		e.progress("ordering run %d/%d: unordered     %8.0f/s", r, e.cfg.runs, rate)
	}
	pairs := []kv{fint("keys", orderingKeys)}
	for _, p := range orderingPartitions {
		pairs = append(pairs, frate("p"+strconv.Itoa(p)+"_per_s", median(rates[p])))
	}
	pairs = append(pairs, frate("lanes"+strconv.Itoa(orderingLanes)+"_per_s", median(laned)), frate("unordered_per_s", median(plain)),
		fratio("ratio", median(ratios)), fint("n", n), fint("runs", e.cfg.runs))
	printResult(out, figOrdering, pairs...)
	return nil
}

// drainOrdered pre-enqueues n tasks over orderingKeys keys (round robin) and
// times their drain with the given partition or lane count; both 0 means
// unordered.
func (e *env) drainOrdered(ctx context.Context, n, partitions, lanes int) (float64, error) {
	taskType := "bench.ord" + strconv.Itoa(partitions)
	if lanes > 0 {
		taskType = "bench.lane" + strconv.Itoa(lanes)
	}
	ordered := partitions > 0 || lanes > 0
	nc, err := e.connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	untracked := framework.WithStateTracking(false)
	cl, err := framework.NewClient(nc, framework.WithMaxPending(e.cfg.window), untracked)
	if err != nil {
		return 0, err
	}
	specs := make([]framework.TaskSpec, n)
	for i := range specs {
		specs[i] = framework.TaskSpec{Type: taskType, Payload: e.payload}
		if ordered {
			specs[i].Options = []framework.EnqueueOption{framework.Ordered("key-" + strconv.Itoa(i%orderingKeys))}
		}
	}
	if _, err := cl.EnqueueMany(ctx, specs); err != nil {
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
	var opts []framework.HandlerOption
	switch {
	case lanes > 0:
		opts = append(opts, framework.WithOrdering(framework.Ordering{Lanes: lanes}))
	case partitions > 0:
		opts = append(opts, framework.WithOrdering(framework.Ordering{Partitions: partitions}))
	}
	w.HandleFunc(taskType, func(context.Context, *framework.Task) error { time.Sleep(orderingWork); return nil }, opts...)
	// The clock starts once the consumers exist (256 partitions take a
	// while to create): Start returns before any fetcher pulls.
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return 0, err
	}
	tm := startTimer()
	werr := e.waitFor(ctx, finished, "the drain of "+taskType)
	res := tm.result(n)
	if err := errors.Join(werr, stop()); err != nil {
		return 0, err
	}
	return res.rate, nil
}
