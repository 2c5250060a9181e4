package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// Task types of the batch figure.
const (
	typeBatchSingle = "bench.batchsingle"
	typeBatch       = "bench.batch"
)

// batchSize is the batch of the batch figure; batchCall what one call to
// its sink costs, whatever it carries.
const (
	batchSize = 100
	batchCall = time.Millisecond
)

// sink is a service written to over one connection: one call at a time,
// each costing batchCall whatever it carries (a database insert of one row
// or of a hundred, a bulk notification API).
type sink struct {
	mu   sync.Mutex
	rows int
}

func (s *sink) write(rows int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	time.Sleep(batchCall)
	s.rows += rows
}

// runBatch drains n tasks into the sink one by one (framework.Handle: one
// call per task), then n through framework.HandleBatch with batches of
// batchSize (one call per batch), each on a worker with batchSize slots,
// and prints the medians of -runs rounds:
//
//	RESULT batch size=100 per_s=… single_per_s=… ratio=… n=… runs=…
func (e *env) runBatch(ctx context.Context, out io.Writer) error {
	n := min(e.cfg.n, 20000)
	single := min(n, 2000) // one call per task: 1 ms each
	var batched, one []float64
	for r := 1; r <= e.cfg.runs; r++ {
		s := &sink{}
		rate, err := e.drainInto(ctx, typeBatchSingle, single, func(w *framework.Worker, done func()) {
			framework.Handle(w, typeBatchSingle, func(_ context.Context, _ *framework.Task, _ int) error {
				s.write(1)
				done()
				return nil
			})
		})
		if err != nil {
			return err
		}
		one = append(one, rate)
		rate, err = e.drainInto(ctx, typeBatch, n, func(w *framework.Worker, done func()) {
			framework.HandleBatch(w, typeBatch, framework.Batch{Size: batchSize, MaxWait: 20 * time.Millisecond},
				func(_ context.Context, items []framework.BatchItem[int]) error {
					s.write(len(items))
					for range items {
						done()
					}
					return nil
				})
		})
		if err != nil {
			return err
		}
		batched = append(batched, rate)
		e.progress("batch run %d/%d: one by one %.0f/s, batches of %d %.0f/s", r, e.cfg.runs, one[len(one)-1], batchSize, rate)
	}
	b, o := median(batched), median(one)
	fmt.Fprintf(out, "RESULT batch size=%d per_s=%.0f single_per_s=%.0f ratio=%.1f n=%d runs=%d\n", batchSize, b, o, b/o, n, e.cfg.runs)
	return nil
}

// drainInto enqueues n tasks of taskType, then starts a worker with
// batchSize slots that reg registers a handler on, and returns the tasks
// run per second from its start to the last task's done.
func (e *env) drainInto(ctx context.Context, taskType string, n int, reg func(w *framework.Worker, done func())) (float64, error) {
	nc, err := e.connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc)
	if err != nil {
		return 0, err
	}
	specs := make([]framework.TaskSpec, n)
	for i := range specs {
		specs[i] = framework.TaskSpec{Type: taskType, Payload: i}
	}
	if _, err := cl.EnqueueMany(ctx, specs); err != nil {
		return 0, err
	}
	w, stop, err := e.newWorker(framework.WithConcurrency(batchSize))
	if err != nil {
		return 0, err
	}
	var mu sync.Mutex
	left := n
	all := make(chan struct{})
	reg(w, func() {
		mu.Lock()
		left--
		if left == 0 {
			close(all)
		}
		mu.Unlock()
	})
	start := time.Now()
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return 0, err
	}
	select {
	case <-all:
	case <-time.After(e.cfg.timeout):
		_ = stop()
		return 0, fmt.Errorf("bench: %s: %d of %d tasks ran within %v", taskType, n-left, n, e.cfg.timeout)
	case <-ctx.Done():
		_ = stop()
		return 0, ctx.Err()
	}
	rate := float64(n) / time.Since(start).Seconds()
	return rate, stop()
}
