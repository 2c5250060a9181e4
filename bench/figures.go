package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/metrics"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// ---- drain ----

func (e *env) figureDrain(ctx context.Context, out io.Writer) error {
	return e.compare(ctx, out, figDrain, e.fresh(e.drainRawWithDedup), e.fresh(e.drainJetflowRun), fint("n", e.cfg.n))
}

// fresh returns side, run after the task stream was deleted and created
// again, when the bench owns the server (not with -url). The server keeps
// the Nats-Msg-Id of every message stored within a stream's duplicate
// window (two minutes) and drops that table only with the stream; every
// jetflow task carries one. Without this, a drain would run beside the IDs
// of the earlier rounds' jetflow tasks, a number that grows with the
// round, and in the embedded figures the garbage collector of the bench's
// own process scans them while either side drains (decision 029). With
// it, each side starts with the table empty, and a jetflow drain carries
// only its own tasks' IDs, as a backlog enqueued just before it would.
func (e *env) fresh(side func(context.Context) (runResult, error)) func(context.Context) (runResult, error) {
	return func(ctx context.Context) (runResult, error) {
		if e.url != "" && e.server == nil {
			return side(ctx) // a server given with -url: the bench only purges its subjects there
		}
		name := e.names.TaskStream()
		if err := e.js.DeleteStream(ctx, name); err != nil {
			return runResult{}, fmt.Errorf("bench: delete %s: %w", name, err)
		}
		if _, err := streams.Ensure(ctx, e.js, e.topology()); err != nil {
			return runResult{}, fmt.Errorf("bench: ensure topology: %w", err)
		}
		st, err := e.js.Stream(ctx, name)
		if err != nil {
			return runResult{}, fmt.Errorf("bench: task stream: %w", err)
		}
		e.stream = st
		return side(ctx)
	}
}

// runResult is one timed run of one side: its rate, and the CPU time the
// whole process (embedded server included) spent per task while timed.
type runResult struct {
	rate float64
	cpu  time.Duration
	// allocs is the heap allocations per task of the whole process
	// (embedded server included), for the progress lines.
	allocs float64
	// how and variants: for a side measured several ways, which one this
	// is, and the rate of each way (the raw drain: Consume and Messages).
	how      string
	variants map[string]float64
	// dedup: the raw drain of messages that carry a Nats-Msg-Id, as
	// jetflow's tasks do (drainRawWithDedup); nil when not measured.
	dedup *runResult
}

// timer measures one timed section: wall time and process CPU time.
type timer struct {
	start   time.Time
	cpu0    time.Duration
	mallocs uint64
	prof    *os.File
}

func startTimer() timer {
	prof := startTimedProfile()
	return timer{start: time.Now(), cpu0: processCPU(), mallocs: mallocs(), prof: prof}
}

// mallocs is the process's count of heap allocations so far.
func mallocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// result returns the rate and the CPU time per task of n tasks since t started.
func (t timer) result(n int) runResult {
	elapsed := time.Since(t.start)
	cpu := processCPU() - t.cpu0
	allocs := float64(mallocs()-t.mallocs) / float64(n)
	stopTimedProfile(t.prof)
	return runResult{rate: float64(n) / elapsed.Seconds(), cpu: cpu / time.Duration(n), allocs: allocs}
}

// compare runs cfg.runs rounds of raw then jetflow, back to back, and prints
// the medians of their rates and the median of the rounds' ratios
// (jetflow/raw). Each round's ratio compares two runs a second apart, so
// load that drifts between rounds (other processes on the machine) cancels
// out better than in the ratio of the medians. It also prints the median
// CPU time per task of each side (raw_cpu_us, jetflow_cpu_us): the whole
// process's, embedded server included, which other processes disturb far
// less than rates. With -side only one side runs (for profiling) and the
// ratio is 0.
func (e *env) compare(ctx context.Context, out io.Writer, figure string, raw, jetflow func(context.Context) (runResult, error), extra ...kv) error {
	var rawRates, jfRates, ratios, rawCPU, jfCPU []float64
	var dedupRates, dedupRatios, dedupCPU []float64 // the raw side's dedup run, when measured
	variants := map[string][]float64{}              // rates of each way the raw side was measured
	var variantNames []string
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for r := 1; r <= e.cfg.runs; r++ {
		var rr, jr runResult
		var err error
		if e.cfg.side != sideJetflow {
			if rr, err = raw(ctx); err != nil {
				return fmt.Errorf("raw run %d: %w", r, err)
			}
			e.progress("%s run %d/%d raw:     %8.0f tasks/s, %5.1f µs CPU/task, %5.1f allocs/task", figure, r, e.cfg.runs, rr.rate, us(rr.cpu), rr.allocs)
			rawRates, rawCPU = append(rawRates, rr.rate), append(rawCPU, us(rr.cpu))
			for _, v := range []string{rawConsume, rawMessages} {
				if rate, ok := rr.variants[v]; ok {
					if _, seen := variants[v]; !seen {
						variantNames = append(variantNames, v)
					}
					variants[v] = append(variants[v], rate)
				}
			}
			if len(rr.variants) > 0 {
				e.progress("%s run %d/%d raw: consume %8.0f tasks/s, messages %8.0f tasks/s", figure, r, e.cfg.runs, rr.variants[rawConsume], rr.variants[rawMessages])
			}
			if d := rr.dedup; d != nil {
				e.progress("%s run %d/%d raw with Nats-Msg-Id: %8.0f tasks/s, %5.1f µs CPU/task (consume %.0f, messages %.0f)",
					figure, r, e.cfg.runs, d.rate, us(d.cpu), d.variants[rawConsume], d.variants[rawMessages])
				dedupRates, dedupCPU = append(dedupRates, d.rate), append(dedupCPU, us(d.cpu))
			}
		}
		if e.cfg.side != sideRaw {
			if jr, err = jetflow(ctx); err != nil {
				return fmt.Errorf("jetflow run %d: %w", r, err)
			}
			e.progress("%s run %d/%d jetflow: %8.0f tasks/s, %5.1f µs CPU/task, %5.1f allocs/task", figure, r, e.cfg.runs, jr.rate, us(jr.cpu), jr.allocs)
			jfRates, jfCPU = append(jfRates, jr.rate), append(jfCPU, us(jr.cpu))
		}
		if rr.rate > 0 && jr.rate > 0 {
			e.progress("%s run %d/%d ratio %.3f", figure, r, e.cfg.runs, jr.rate/rr.rate)
			ratios = append(ratios, jr.rate/rr.rate)
			if rr.dedup != nil && rr.dedup.rate > 0 {
				dedupRatios = append(dedupRatios, jr.rate/rr.dedup.rate)
			}
		}
	}
	var pairs []kv
	if len(variantNames) > 0 {
		// raw=<the way with the higher median>; raw_per_s is the median
		// of each round's faster way, the one its ratio was taken against.
		best := variantNames[0]
		for _, v := range variantNames[1:] {
			if median(variants[v]) > median(variants[best]) {
				best = v
			}
		}
		pairs = append(pairs, kv{"raw", best})
	}
	pairs = append(pairs, frate("raw_per_s", median(rawRates)), frate("jetflow_per_s", median(jfRates)),
		fratio("ratio", median(ratios)))
	pairs = append(pairs, extra...)
	for _, v := range variantNames {
		pairs = append(pairs, frate("raw_"+v+"_per_s", median(variants[v])))
	}
	pairs = append(pairs, fcpu("raw_cpu_us", median(rawCPU)), fcpu("jetflow_cpu_us", median(jfCPU)))
	if len(dedupRates) > 0 {
		pairs = append(pairs, frate("raw_dedup_per_s", median(dedupRates)), fcpu("raw_dedup_cpu_us", median(dedupCPU)))
		if len(dedupRatios) > 0 {
			pairs = append(pairs, fratio("ratio_dedup", median(dedupRatios)))
		}
	}
	printResult(out, figure, append(pairs, fint("runs", e.cfg.runs))...)
	return nil
}

// drainJetflowRun pre-enqueues n no-op tasks with Client.EnqueueMany and
// times their drain by a jetflow worker, from Start to the n-th
// acknowledged task: the rate and the CPU time per task. Task state
// tracking is off on both: like the raw side, one message per task (the
// drain_state figure measures tracking).
func (e *env) drainJetflowRun(ctx context.Context) (runResult, error) {
	return e.drainJetflowRunAt(ctx, streams.Priorities[:])
}

// drainJetflowRunAt is drainJetflowRun with a worker that serves the drain's
// type at prios only (see drainJetflowServing).
func (e *env) drainJetflowRunAt(ctx context.Context, prios []streams.Priority) (runResult, error) {
	n := e.cfg.n
	untracked := framework.WithStateTracking(false)
	if err := e.enqueueJobsClient(ctx, append([]framework.ClientOption{untracked}, e.jfClientOpts...), typeDrain, n, e.payload); err != nil {
		return runResult{}, err
	}
	return e.drainJetflowServing(ctx, typeDrain, n, prios)
}

// drainJetflowTimed times the drain of n pre-enqueued no-op tasks of
// taskType by a jetflow worker with its defaults (the concurrency of
// -concurrency, and -prefetch if given), from Start to the n-th acknowledged
// task.
func (e *env) drainJetflowTimed(ctx context.Context, taskType string, n int) (runResult, error) {
	return e.drainJetflowServing(ctx, taskType, n, streams.Priorities[:])
}

// drainWorker returns a worker (state tracking off, and opts) that runs
// tasks of taskType as no-ops, with -prefetch and hopts, counts their
// acknowledgements in done and closes finished at the n-th.
func (e *env) drainWorker(taskType string, n int, hopts []framework.HandlerOption, opts ...framework.WorkerOption) (
	w *framework.Worker, stop func() error, done *atomic.Int64, finished chan struct{}, err error) {
	done, finished = new(atomic.Int64), make(chan struct{})
	opts = append(opts, framework.WithStateTracking(false), framework.WithHooks(framework.Hooks{
		Finished: func(_ context.Context, _ *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionAck && done.Add(1) == int64(n) {
				close(finished)
			}
		},
	}))
	if w, stop, err = e.newWorker(opts...); err != nil {
		return nil, nil, nil, nil, err
	}
	if e.cfg.prefetch > 0 {
		hopts = append(hopts, framework.WithPrefetch(e.cfg.prefetch))
	}
	w.HandleFunc(taskType, func(context.Context, *framework.Task) error { return nil }, hopts...)
	return w, stop, done, finished, nil
}

// drainJetflowServing is drainJetflowTimed with a worker that serves
// taskType at prios only (framework.WithServedPriorities), so that only their
// consumers exist.
func (e *env) drainJetflowServing(ctx context.Context, taskType string, n int, prios []streams.Priority) (runResult, error) {
	var hopts []framework.HandlerOption
	if len(prios) < len(streams.Priorities) {
		hopts = append(hopts, framework.WithServedPriorities(prios...))
	}
	w, stop, done, finished, err := e.drainWorker(taskType, n, hopts)
	if err != nil {
		return runResult{}, err
	}
	if err := e.ensureWorkerConsumers(ctx, taskType, prios...); err != nil {
		_ = stop()
		return runResult{}, err
	}

	tm := startTimer()
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return runResult{}, err
	}
	e.progress("jetflow worker started in %v", time.Since(tm.start).Round(time.Microsecond))
	consumer := e.names.ConsumerName(taskType, streams.PriorityNormal)
	unwatch := e.watch(done, consumer)
	werr := e.waitFor(ctx, finished, "the jetflow drain")
	res := tm.result(n)
	unwatch()
	if err := errors.Join(werr, stop()); err != nil {
		return runResult{}, err
	}
	if s := w.Stats(); s.AckErrors > 0 {
		return runResult{}, fmt.Errorf("bench: %d jetflow acks failed", s.AckErrors)
	}
	if err := e.waitConsumerEmpty(ctx, consumer); err != nil {
		return runResult{}, err
	}
	return res, nil
}

// ---- enqueue ----

func (e *env) figureEnqueue(ctx context.Context, out io.Writer) error {
	return e.compare(ctx, out, figEnqueue, e.fresh(e.enqueueRaw), e.fresh(e.enqueueJetflow), fint("n", e.cfg.n), fint("window", e.cfg.window))
}

// figureDrainNoDedup is the drain figure with tasks enqueued by a client with
// framework.WithDedup(false): no Nats-Msg-Id, so the same message as raw.
func (e *env) figureDrainNoDedup(ctx context.Context, out io.Writer) error {
	e.jfClientOpts = []framework.ClientOption{framework.WithDedup(false)}
	defer func() { e.jfClientOpts = nil }()
	return e.compare(ctx, out, figDrainNoDedup, e.fresh(e.drainRawRun), e.fresh(e.drainJetflowRun), fint("n", e.cfg.n))
}

// figureEnqueueNoDedup is the enqueue figure with framework.WithDedup(false).
func (e *env) figureEnqueueNoDedup(ctx context.Context, out io.Writer) error {
	e.jfClientOpts = []framework.ClientOption{framework.WithDedup(false)}
	defer func() { e.jfClientOpts = nil }()
	return e.compare(ctx, out, figEnqueueNoDedup, e.fresh(e.enqueueRawNoDedup), e.fresh(e.enqueueJetflow), fint("n", e.cfg.n), fint("window", e.cfg.window))
}

// enqueueRaw is the raw side of the enqueue figure: asynchronous publishes
// with a Nats-Msg-Id each, jetflow's default semantics.
func (e *env) enqueueRaw(ctx context.Context) (runResult, error) {
	return e.enqueueRawWith(ctx, rawMsgID)
}

// enqueueRawNoDedup is the raw side of enqueue_nodedup: no header at all.
func (e *env) enqueueRawNoDedup(ctx context.Context) (runResult, error) {
	return e.enqueueRawWith(ctx, "")
}

func (e *env) enqueueRawWith(ctx context.Context, header string) (runResult, error) {
	subject := e.names.TaskSubject(streams.PriorityNormal, typeRawEnq)
	res, err := e.publishRaw(ctx, subject, e.cfg.n, header)
	if err != nil {
		return runResult{}, err
	}
	if err := e.checkStored(ctx, subject, e.cfg.n); err != nil {
		return runResult{}, err
	}
	return res, nil
}

func (e *env) enqueueJetflow(ctx context.Context) (runResult, error) {
	n := e.cfg.n
	nc, err := e.connect()
	if err != nil {
		return runResult{}, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, append([]framework.ClientOption{framework.WithMaxPending(e.cfg.window), framework.WithStateTracking(false)}, e.jfClientOpts...)...)
	if err != nil {
		return runResult{}, err
	}
	jobs := make([]framework.TaskSpec, n)
	var payload any = e.payload
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: typeEnqueue, Payload: payload}
	}
	tm := startTimer()
	if _, err := cl.EnqueueMany(ctx, jobs); err != nil {
		return runResult{}, err
	}
	res := tm.result(n)
	if err := e.checkStored(ctx, e.names.TaskSubject(streams.PriorityNormal, typeEnqueue), n); err != nil {
		return runResult{}, err
	}
	return res, nil
}

// checkStored verifies that subject holds exactly n messages, then purges it.
func (e *env) checkStored(ctx context.Context, subject string, n int) error {
	got, err := e.subjectCount(ctx, subject)
	if err != nil {
		return err
	}
	if err := e.purge(ctx, subject); err != nil {
		return err
	}
	if got != uint64(n) {
		return fmt.Errorf("bench: %s holds %d messages after enqueueing %d", subject, got, n)
	}
	return nil
}
