package main

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/workflow"
)

// The workflow figure compares runs of a 3-step chain of no-op steps with
// single no-op tasks, in the same process and server:
//
//	RESULT workflow steps=3 runs=… runs_per_s=… tasks_per_s=… step_ratio=… atomic_runs_per_s=… atomic_tasks_per_s=… atomic_step_ratio=… step_cpu_us=… task_cpu_us=… raw_chain_steps_per_s=… raw_chain_step_ratio=… raw_doc_chain_step_ratio=… raw_async_chain_step_ratio=… doc_chain_ratio=… unchained_runs_per_s=… unchained_step_ratio=… unchained_step_cpu_us=…
//
// runs_per_s and tasks_per_s are measured with file storage; the atomic_
// pair with memory storage under a second prefix. (Until decision 023 a
// step's result and the next step's task committed in one atomic batch on
// memory and replicated streams, hence the name; run documents now live in
// their own stream and every commit writes the document, then the tasks.) step_ratio is steps/s over tasks/s: the cost of the
// workflow bookkeeping per task (the median of the rounds' ratios, each
// pair measured a few seconds apart, like the other figures' ratios); step_cpu_us and task_cpu_us are the
// process's CPU time (embedded server included) per step and per task on the
// file-storage stream, steadier than rates on a shared machine. The single
// tasks are drained before and after the runs of each round and the faster
// drain counts. Runs are started (and tasks enqueued) before
// the worker starts; the clock runs from worker start to the last
// acknowledged step (or task). The raw_ fields are the floor measured with
// raw JetStream in the same rounds (workflow_raw.go): a chain whose steps are
// only messages, and one that also writes a document per step;
// doc_chain_ratio is jetflow's steps/s (file stream) over the latter's, in
// the same round: what the run document's read, guard and encoding cost
// beyond a raw chain that writes a document per step.

const (
	wfBenchName     = "bench-chain"
	wfUnchainedName = "bench-unchained"
	wfBenchSteps    = 3
	wfBenchTask     = "bench.wftask"
	wfAtomicPrefix  = "wfatomic"
)

// runWorkflow measures and prints the workflow figure. runs = max(n/10, 100)
// runs per measurement, against 3×runs single tasks; each measurement is
// repeated cfg.runs times and the medians are reported.
func runWorkflow(ctx context.Context, e *env, out io.Writer) error {
	runs := max(e.cfg.n/10, 100)
	tasks := wfBenchSteps * runs
	if _, err := streams.Ensure(ctx, e.js, streams.Config{Prefix: wfAtomicPrefix, Storage: jetstream.MemoryStorage}); err != nil {
		return fmt.Errorf("bench: ensure %s topology: %w", wfAtomicPrefix, err)
	}
	defer e.dropTopology(wfAtomicPrefix)
	// The default: on a worker without middleware, steps two and three
	// run on the task of step one (workflow.WithChaining, decision 048).
	def := workflow.New(wfBenchName)
	noop := func(context.Context, struct{}) (struct{}, error) { return struct{}{}, nil }
	workflow.Step(def, "one", noop)
	workflow.Step(def, "two", noop, workflow.After("one"))
	workflow.Step(def, "three", noop, workflow.After("two"))
	// The same chain with workflow.WithoutChaining: each step a task.
	chainedDef := workflow.New(wfUnchainedName, workflow.WithoutChaining())
	workflow.Step(chainedDef, "one", noop)
	workflow.Step(chainedDef, "two", noop, workflow.After("one"))
	workflow.Step(chainedDef, "three", noop, workflow.After("two"))

	ratio := func(runs, tasks float64) float64 {
		if tasks == 0 {
			return 0
		}
		return runs * wfBenchSteps / tasks
	}
	var runRates, taskRates, atomicRunRates, atomicTaskRates, stepCPU, taskCPU, ratios, atomicRatios []float64
	var chainedRates, chainedRatios, chainedCPU []float64
	var rawChain, rawChainRatios, rawDocChainRatios, rawAsyncChainRatios, vsDocChain []float64
	for r := 1; r <= e.cfg.runs; r++ {
		rc, err := e.rawChainRound(ctx, runs)
		if err != nil {
			return fmt.Errorf("raw chain run %d: %w", r, err)
		}
		e.progress("workflow run %d/%d raw chain: %8.0f steps/s, with a document per step %8.0f steps/s, asynchronous %8.0f steps/s, single %8.0f/s",
			r, e.cfg.runs, rc.chain, rc.docChain, rc.asyncChain, rc.single)
		rawChain = append(rawChain, rc.chain)
		rawChainRatios = append(rawChainRatios, rc.chain/rc.single)
		rawDocChainRatios = append(rawDocChainRatios, rc.docChain/rc.single)
		rawAsyncChainRatios = append(rawAsyncChainRatios, rc.asyncChain/rc.single)
		for _, prefix := range []string{streams.DefaultPrefix, wfAtomicPrefix} {
			tr, tcpu, err := e.wfTasks(ctx, prefix, tasks)
			if err != nil {
				return fmt.Errorf("tasks (%s) run %d: %w", prefix, r, err)
			}
			rr, rcpu, err := e.wfRuns(ctx, prefix, def, runs)
			if err != nil {
				return fmt.Errorf("runs (%s) run %d: %w", prefix, r, err)
			}
			var cr float64
			var ccpu time.Duration
			if prefix == streams.DefaultPrefix {
				if cr, ccpu, err = e.wfRuns(ctx, prefix, chainedDef, runs); err != nil {
					return fmt.Errorf("unchained runs run %d: %w", r, err)
				}
			}
			// The single tasks again after the runs; the faster drain
			// counts. A drain of 3×runs tasks is short, and one that
			// lands on a bad moment of the machine would flatter the
			// ratio.
			tr2, tcpu2, err := e.wfTasks(ctx, prefix, tasks)
			if err != nil {
				return fmt.Errorf("tasks (%s) run %d: %w", prefix, r, err)
			}
			if tr2 > tr {
				tr, tcpu = tr2, tcpu2
			}
			e.progress("workflow run %d/%d %-8s: %8.0f runs/s (%8.0f steps/s), %8.0f tasks/s", r, e.cfg.runs, prefix, rr, rr*wfBenchSteps, tr)
			if cr > 0 {
				e.progress("workflow run %d/%d unchained : %8.0f runs/s (%8.0f steps/s)", r, e.cfg.runs, cr, cr*wfBenchSteps)
				chainedRates = append(chainedRates, cr)
				chainedRatios = append(chainedRatios, ratio(cr, tr))
				chainedCPU = append(chainedCPU, ccpu.Seconds()*1e6/wfBenchSteps)
			}
			if prefix == wfAtomicPrefix {
				atomicRunRates, atomicTaskRates = append(atomicRunRates, rr), append(atomicTaskRates, tr)
				atomicRatios = append(atomicRatios, ratio(rr, tr))
			} else {
				ratios = append(ratios, ratio(rr, tr))
				vsDocChain = append(vsDocChain, rr*wfBenchSteps/rc.docChain)
				runRates, taskRates = append(runRates, rr), append(taskRates, tr)
				stepCPU = append(stepCPU, rcpu.Seconds()*1e6/wfBenchSteps)
				taskCPU = append(taskCPU, tcpu.Seconds()*1e6)
			}
		}
	}
	mr, mt, ar, at := median(runRates), median(taskRates), median(atomicRunRates), median(atomicTaskRates)
	printResult(out, "workflow", fint("steps", wfBenchSteps), fint("runs", runs),
		frate("runs_per_s", mr), frate("tasks_per_s", mt), fratio("step_ratio", median(ratios)),
		frate("atomic_runs_per_s", ar), frate("atomic_tasks_per_s", at), fratio("atomic_step_ratio", median(atomicRatios)),
		fcpu("step_cpu_us", median(stepCPU)), fcpu("task_cpu_us", median(taskCPU)),
		frate("raw_chain_steps_per_s", median(rawChain)), fratio("raw_chain_step_ratio", median(rawChainRatios)),
		fratio("raw_doc_chain_step_ratio", median(rawDocChainRatios)), fratio("raw_async_chain_step_ratio", median(rawAsyncChainRatios)),
		fratio("doc_chain_ratio", median(vsDocChain)),
		frate("unchained_runs_per_s", median(chainedRates)), fratio("unchained_step_ratio", median(chainedRatios)),
		fcpu("unchained_step_cpu_us", median(chainedCPU)))
	return nil
}

// wfTasks pre-enqueues n no-op tasks under prefix and times their drain.
// It returns the rate and the process's CPU time per task.
func (e *env) wfTasks(ctx context.Context, prefix string, n int) (float64, time.Duration, error) {
	nc, err := e.connect()
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, framework.WithPrefix(prefix), framework.WithMaxPending(e.cfg.window))
	if err != nil {
		return 0, 0, err
	}
	jobs := make([]framework.TaskSpec, n)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: wfBenchTask}
	}
	if _, err := cl.EnqueueMany(ctx, jobs); err != nil {
		return 0, 0, fmt.Errorf("bench: enqueue: %w", err)
	}
	return e.wfDrain(ctx, prefix, n, wfBenchTask, func(w *framework.Worker) {
		w.HandleFunc(wfBenchTask, func(context.Context, *framework.Task) error { return nil })
	})
}

// wfRuns starts n runs of def under prefix and times them to completion.
// It returns the rate and the process's CPU time per run.
func (e *env) wfRuns(ctx context.Context, prefix string, def *workflow.Definition, n int) (float64, time.Duration, error) {
	nc, err := e.connect()
	if err != nil {
		return 0, 0, err
	}
	defer nc.Close()
	fc, err := framework.NewClient(nc, framework.WithPrefix(prefix))
	if err != nil {
		return 0, 0, err
	}
	wc, err := workflow.NewClient(fc, def)
	if err != nil {
		return 0, 0, err
	}
	var next atomic.Int64
	errs := make(chan error, e.cfg.concurrency)
	var wg sync.WaitGroup
	for range e.cfg.concurrency {
		wg.Go(func() {
			for next.Add(1) <= int64(n) {
				if _, err := wc.Start(ctx, def.Name(), nil); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, fmt.Errorf("bench: start run: %w", err)
	}
	steps := def.Steps()
	// A run is over when the task of its last step is acknowledged; with
	// chaining (the default), that step runs on the task of the first.
	last := workflow.StepTaskType(def.Name(), steps[0])
	if def.Name() == wfUnchainedName {
		last = workflow.StepTaskType(def.Name(), steps[len(steps)-1])
	}
	return e.wfDrain(ctx, prefix, n, last, func(w *framework.Worker) { workflow.Register(w, def) })
}

// wfDrain starts a worker under prefix with handlers from register and
// returns n divided by the time from its start to the n-th acknowledged task
// of type last, and the process's CPU time meanwhile divided by n.
func (e *env) wfDrain(ctx context.Context, prefix string, n int, last string, register func(*framework.Worker)) (float64, time.Duration, error) {
	var done atomic.Int64
	finished := make(chan struct{})
	w, stop, err := e.newWorker(framework.WithPrefix(prefix), framework.WithHooks(framework.Hooks{
		Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionAck && t.Type == last && done.Add(1) == int64(n) {
				close(finished)
			}
		},
	}))
	if err != nil {
		return 0, 0, err
	}
	register(w)
	tm := startTimer()
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return 0, 0, err
	}
	werr := e.waitFor(ctx, finished, fmt.Sprintf("%d × %s", n, last))
	res := tm.result(n)
	if err := stop(); err != nil {
		return 0, 0, err
	}
	if werr != nil {
		return 0, 0, werr
	}
	return res.rate, res.cpu, nil
}

// dropTopology deletes the streams of prefix, best effort.
func (e *env) dropTopology(prefix string) {
	cfgs, err := streams.StreamConfigs(streams.Config{Prefix: prefix})
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range cfgs {
		_ = e.js.DeleteStream(ctx, c.Name)
	}
}
