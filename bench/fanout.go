package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/workflow"
)

// figFanout names the fan-out figure.
const figFanout = "fanout"

// The fan-out figure: one run whose list step returns fanoutItems integers,
// a workflow.ForEach step over them (a no-op per item, at most
// fanoutParallel at once) and a join reading every result with
// workflow.Results, on one worker with fanoutParallel slots:
//
//	RESULT fanout items=10000 parallel=… runs_per_s=… items_per_s=… join_ok=… runs=…
//
// The clock runs from Start to the run's completion (Client.Wait); join_ok
// is 1 when every round's join got all the results, in item order.
const (
	fanoutItems    = 10000
	fanoutParallel = 200
	fanoutName     = "bench-fanout"
)

// runFanout measures and prints the fan-out figure: the median of -runs
// rounds.
func (e *env) runFanout(ctx context.Context, out io.Writer) error {
	ok := make(chan bool, 1)
	def := workflow.New(fanoutName, workflow.WithMaxOutputBytes(1<<20))
	workflow.Step(def, "list", func(context.Context, struct{}) ([]int, error) {
		l := make([]int, fanoutItems)
		for i := range l {
			l[i] = i
		}
		return l, nil
	})
	workflow.ForEach(def, "each", "list", func(_ context.Context, i int) (int, error) { return i, nil },
		workflow.MaxParallel(fanoutParallel))
	workflow.Step(def, "join", func(ctx context.Context, _ struct{}) (int, error) {
		res, err := workflow.Results[int](ctx, "each")
		if err != nil {
			return 0, err
		}
		good := len(res) == fanoutItems
		for i, v := range res {
			good = good && v == i
		}
		select {
		case ok <- good:
		default:
		}
		return len(res), nil
	}, workflow.After("each"))

	w, stop, err := e.newWorker(framework.WithConcurrency(fanoutParallel))
	if err != nil {
		return err
	}
	defer func() { _ = stop() }()
	workflow.Register(w, def)
	if err := w.Start(ctx); err != nil {
		return err
	}
	nc, err := e.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	fc, err := framework.NewClient(nc)
	if err != nil {
		return err
	}
	wc, err := workflow.NewClient(fc, def)
	if err != nil {
		return err
	}
	var rates []float64
	joinOK := 1
	for r := 1; r <= e.cfg.runs; r++ {
		start := time.Now()
		id, err := wc.Start(ctx, fanoutName, nil)
		if err != nil {
			return fmt.Errorf("bench: start fan-out run: %w", err)
		}
		wctx, cancel := context.WithTimeout(ctx, e.cfg.timeout)
		run, err := wc.Wait(wctx, id)
		cancel()
		if err != nil {
			return fmt.Errorf("bench: fan-out run %s: %w", id, err)
		}
		if run.Status != workflow.RunCompleted {
			return fmt.Errorf("bench: fan-out run %s %s: %s", id, run.Status, run.Error)
		}
		d := time.Since(start)
		select {
		case good := <-ok:
			if !good {
				joinOK = 0
			}
		default:
			joinOK = 0 // completed without the join reporting
		}
		rates = append(rates, 1/d.Seconds())
		e.progress("fanout run %d/%d: %d items in %v (%.0f items/s)", r, e.cfg.runs, fanoutItems, d.Round(time.Millisecond), fanoutItems/d.Seconds())
	}
	m := median(rates)
	printResult(out, figFanout, fint("items", fanoutItems), fint("parallel", fanoutParallel),
		fratio("runs_per_s", m), frate("items_per_s", m*fanoutItems), fint("join_ok", joinOK), fint("runs", e.cfg.runs))
	return nil
}
