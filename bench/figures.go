package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// ---- drain ----

func (e *env) figureDrain(ctx context.Context, out io.Writer) error {
	return e.compare(ctx, out, figDrain, e.drainRawRun, e.drainJetflowRun, fint("n", e.cfg.n))
}

// runResult is one timed run of one side: its rate, and the CPU time the
// whole process (embedded server included) spent per task while timed.
type runResult struct {
	rate float64
	cpu  time.Duration
	// how and variants: for a side measured several ways, which one this
	// is, and the rate of each way (the raw drain: Consume and Messages).
	how      string
	variants map[string]float64
}

// timer measures one timed section: wall time and process CPU time.
type timer struct {
	start time.Time
	cpu0  time.Duration
	prof  *os.File
}

func startTimer() timer {
	prof := startTimedProfile()
	return timer{start: time.Now(), cpu0: processCPU(), prof: prof}
}

// result returns the rate and the CPU time per task of n tasks since t started.
func (t timer) result(n int) runResult {
	elapsed := time.Since(t.start)
	cpu := processCPU() - t.cpu0
	stopTimedProfile(t.prof)
	return runResult{rate: float64(n) / elapsed.Seconds(), cpu: cpu / time.Duration(n)}
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
	variants := map[string][]float64{} // rates of each way the raw side was measured
	var variantNames []string
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	for r := 1; r <= e.cfg.runs; r++ {
		var rr, jr runResult
		var err error
		if e.cfg.side != sideJetflow {
			if rr, err = raw(ctx); err != nil {
				return fmt.Errorf("raw run %d: %w", r, err)
			}
			e.progress("%s run %d/%d raw:     %8.0f tasks/s, %5.1f µs CPU/task", figure, r, e.cfg.runs, rr.rate, us(rr.cpu))
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
		}
		if e.cfg.side != sideRaw {
			if jr, err = jetflow(ctx); err != nil {
				return fmt.Errorf("jetflow run %d: %w", r, err)
			}
			e.progress("%s run %d/%d jetflow: %8.0f tasks/s, %5.1f µs CPU/task", figure, r, e.cfg.runs, jr.rate, us(jr.cpu))
			jfRates, jfCPU = append(jfRates, jr.rate), append(jfCPU, us(jr.cpu))
		}
		if rr.rate > 0 && jr.rate > 0 {
			e.progress("%s run %d/%d ratio %.3f", figure, r, e.cfg.runs, jr.rate/rr.rate)
			ratios = append(ratios, jr.rate/rr.rate)
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
	printResult(out, figure, append(pairs, fint("runs", e.cfg.runs))...)
	return nil
}

// drainJetflow pre-enqueues n no-op tasks with Client.EnqueueMany and times
// their drain by a jetflow worker, from Start to the n-th acknowledged task.
// Task state tracking is off on both: like the raw side, one message per
// task (the drain_state figure measures tracking). It returns the rate.
func (e *env) drainJetflow(ctx context.Context) (float64, error) {
	r, err := e.drainJetflowRun(ctx)
	return r.rate, err
}

// drainJetflowRun is drainJetflow with the CPU time per task.
func (e *env) drainJetflowRun(ctx context.Context) (runResult, error) {
	n := e.cfg.n
	untracked := framework.WithStateTracking(false)
	if err := e.enqueueJobsClient(ctx, append([]framework.ClientOption{untracked}, e.jfClientOpts...), typeDrain, n, e.payload); err != nil {
		return runResult{}, err
	}
	return e.drainJetflowTimed(ctx, typeDrain, n)
}

// drainJetflowTimed times the drain of n pre-enqueued no-op tasks of
// taskType by a jetflow worker with its defaults (the concurrency of
// -concurrency, and -prefetch if given), from Start to the n-th acknowledged
// task.
func (e *env) drainJetflowTimed(ctx context.Context, taskType string, n int) (runResult, error) {
	var done atomic.Int64
	finished := make(chan struct{})
	w, stop, err := e.newWorker(framework.WithStateTracking(false), framework.WithHooks(framework.Hooks{
		Finished: func(_ context.Context, _ *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionAck && done.Add(1) == int64(n) {
				close(finished)
			}
		},
	}))
	if err != nil {
		return runResult{}, err
	}
	var hopts []framework.HandlerOption
	if e.cfg.prefetch > 0 {
		hopts = append(hopts, framework.WithPrefetch(e.cfg.prefetch))
	}
	w.HandleFunc(taskType, func(context.Context, *framework.Task) error { return nil }, hopts...)

	tm := startTimer()
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return runResult{}, err
	}
	consumer := e.names.ConsumerName(taskType, streams.PriorityNormal)
	unwatch := e.watch(&done, consumer)
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
	return e.compare(ctx, out, figEnqueue, e.enqueueRaw, e.enqueueJetflow, fint("n", e.cfg.n), fint("window", e.cfg.window))
}

// figureDrainNoDedup is the drain figure with tasks enqueued by a client with
// framework.WithDedup(false): no Nats-Msg-Id, so the same message as raw.
func (e *env) figureDrainNoDedup(ctx context.Context, out io.Writer) error {
	e.jfClientOpts = []framework.ClientOption{framework.WithDedup(false)}
	defer func() { e.jfClientOpts = nil }()
	return e.compare(ctx, out, figDrainNoDedup, e.drainRawRun, e.drainJetflowRun, fint("n", e.cfg.n))
}

// figureEnqueueNoDedup is the enqueue figure with framework.WithDedup(false).
func (e *env) figureEnqueueNoDedup(ctx context.Context, out io.Writer) error {
	e.jfClientOpts = []framework.ClientOption{framework.WithDedup(false)}
	defer func() { e.jfClientOpts = nil }()
	return e.compare(ctx, out, figEnqueueNoDedup, e.enqueueRawNoDedup, e.enqueueJetflow, fint("n", e.cfg.n), fint("window", e.cfg.window))
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

// ---- latency ----

// sample is one enqueue→start measurement: when the task was sent (offset
// from the figure's start) and how long it took to start.
type sample struct {
	sent, lat time.Duration
}

// recorder collects samples from handlers and closes done when want arrive.
type recorder struct {
	mu      sync.Mutex
	samples []sample
	want    int
	done    chan struct{}
}

func newRecorder(capacity int) *recorder {
	return &recorder{samples: make([]sample, 0, capacity), want: -1, done: make(chan struct{})}
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.checkLocked()
	r.mu.Unlock()
}

// expect sets the number of samples that closes done.
func (r *recorder) expect(n int) {
	r.mu.Lock()
	r.want = n
	r.checkLocked()
	r.mu.Unlock()
}

func (r *recorder) checkLocked() {
	if r.want >= 0 && len(r.samples) == r.want {
		close(r.done)
		r.want = -1
	}
}

func (r *recorder) latencies(sentFrom time.Duration) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, 0, len(r.samples))
	for _, s := range r.samples {
		if s.sent >= sentFrom {
			out = append(out, s.lat)
		}
	}
	return out
}

// stampHandler records, for tasks whose payload is the send offset from t0
// in nanoseconds, the time from send to handler start.
func stampHandler(t0 time.Time, rec *recorder) func(context.Context, *framework.Task) error {
	return func(_ context.Context, t *framework.Task) error {
		now := time.Since(t0)
		sent, err := strconv.ParseInt(string(t.Payload), 10, 64)
		if err != nil {
			return framework.Permanent(fmt.Errorf("bench: payload %q: %w", t.Payload, err))
		}
		rec.add(sample{sent: time.Duration(sent), lat: now - time.Duration(sent)})
		return nil
	}
}

// stampedEnqueue enqueues one task whose payload is the send offset from t0.
func stampedEnqueue(ctx context.Context, cl *framework.Client, t0 time.Time, taskType string, opts ...framework.EnqueueOption) error {
	sent := time.Since(t0)
	_, err := cl.Enqueue(ctx, taskType, json.RawMessage(strconv.AppendInt(nil, int64(sent), 10)), opts...)
	return err
}

func (e *env) figureLatency(ctx context.Context, out io.Writer) error {
	var p50s, p99s []float64
	sent := 0
	for r := 1; r <= e.cfg.runs; r++ {
		p50, p99, k, err := e.latencyRun(ctx)
		if err != nil {
			return fmt.Errorf("run %d: %w", r, err)
		}
		e.progress("latency run %d/%d: %d tasks at %d/s, p50 %.2f ms, p99 %.2f ms", r, e.cfg.runs, k, e.cfg.latencyRate, ms(p50), ms(p99))
		p50s, p99s = append(p50s, ms(p50)), append(p99s, ms(p99))
		sent = k
	}
	printResult(out, figLatency, fint("rate_per_s", e.cfg.latencyRate), fms("p50_ms", median(p50s)), fms("p99_ms", median(p99s)),
		fint("samples", sent), fint("runs", e.cfg.runs))
	return nil
}

// latencyRun enqueues tasks at a steady rate, one Enqueue per tick of a
// ticker, and measures enqueue→handler start. Tasks sent during the warm-up
// are run but not measured. It returns p50, p99 and the measured count.
func (e *env) latencyRun(ctx context.Context) (time.Duration, time.Duration, int, error) {
	total := int(int64(e.cfg.latencyRate) * int64(e.cfg.latencyWarmup+e.cfg.latencyDur) / int64(time.Second))
	t0 := time.Now()
	rec := newRecorder(total)
	w, stop, err := e.newWorker(e.tracking())
	if err != nil {
		return 0, 0, 0, err
	}
	w.HandleFunc(typeLatency, stampHandler(t0, rec))
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return 0, 0, 0, err
	}
	nc, err := e.connect()
	if err != nil {
		_ = stop()
		return 0, 0, 0, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, e.tracking())
	if err != nil {
		_ = stop()
		return 0, 0, 0, err
	}
	firstSend := time.Since(t0)
	failed := e.paced(ctx, time.Second/time.Duration(e.cfg.latencyRate), total, nil, func() error {
		return stampedEnqueue(ctx, cl, t0, typeLatency)
	})
	rec.expect(total - failed)
	werr := e.waitFor(ctx, rec.done, "latency tasks")
	if err := errors.Join(werr, stop()); err != nil {
		return 0, 0, 0, err
	}
	if failed > 0 {
		return 0, 0, 0, fmt.Errorf("bench: %d enqueues failed", failed)
	}
	lats := rec.latencies(firstSend + e.cfg.latencyWarmup)
	return percentile(lats, 50), percentile(lats, 99), len(lats), nil
}

// paced calls send in its own goroutine on every tick of a ticker with the
// given interval, max times or until until is closed, and returns the number
// of failed sends once all have returned.
func (e *env) paced(ctx context.Context, every time.Duration, maxSends int, until <-chan struct{}, send func() error) int {
	var failed atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(every)
	defer tick.Stop()
loop:
	for i := 0; maxSends < 0 || i < maxSends; i++ {
		select {
		case <-tick.C:
		case <-until:
			break loop
		case <-ctx.Done():
			break loop
		}
		wg.Go(func() {
			if err := send(); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}

// ---- delay ----

func (e *env) figureDelay(ctx context.Context, out io.Writer) error {
	var p50s, p99s, maxs, rawP99s, firedP99s []float64
	early := 0
	for r := 1; r <= e.cfg.runs; r++ {
		fired, rawStart, err := e.delayRaw(ctx)
		if err != nil {
			return fmt.Errorf("raw run %d: %w", r, err)
		}
		firedP99, rawP99 := percentile(fired, 99), percentile(rawStart, 99)
		e.progress("delay run %d/%d raw: %d schedules fired p50 %.2f ms, p99 %.2f ms late; received p99 %.2f ms late",
			r, e.cfg.runs, e.cfg.delayTasks, ms(percentile(fired, 50)), ms(firedP99), ms(rawP99))
		res, err := e.delayRun(ctx)
		if err != nil {
			return fmt.Errorf("jetflow run %d: %w", r, err)
		}
		e.progress("delay run %d/%d jetflow: %d tasks due %s, early %d, p50 %.2f ms, p99 %.2f ms, max %.2f ms",
			r, e.cfg.runs, e.cfg.delayTasks, res.due.Format("15:04:05.000"), res.early, ms(res.p50), ms(res.p99), ms(res.max))
		p50s, p99s, maxs = append(p50s, ms(res.p50)), append(p99s, ms(res.p99)), append(maxs, ms(res.max))
		rawP99s, firedP99s = append(rawP99s, ms(rawP99)), append(firedP99s, ms(firedP99))
		early += res.early
	}
	// Early starts are summed over all runs: one is one too many.
	printResult(out, figDelay, fint("tasks", e.cfg.delayTasks), fint("early", early), fms("p50_ms", median(p50s)),
		fms("p99_ms", median(p99s)), fms("max_ms", median(maxs)), fms("fired_p99_ms", median(firedP99s)),
		fms("raw_p99_ms", median(rawP99s)), fint("runs", e.cfg.runs))
	return nil
}

// delayRaw is the raw side of the delay figure: cfg.delayTasks schedule
// messages (Nats-Schedule "@at", nanosecond precision) due the same instant,
// targeting a subject read by a plain pull consumer (cfg.concurrency
// goroutines that take and ack). For each message it returns how late the
// server stored the fired message (its stream timestamp) and how late a
// goroutine received it, both relative to the due time.
func (e *env) delayRaw(ctx context.Context) (fired, received []time.Duration, err error) {
	n := e.cfg.delayTasks
	// Schedules fire into the schedule stream's staging subject, which the
	// task stream sources onto the work subject.
	target := e.names.FiredSubject(streams.PriorityNormal, typeRawDelay)
	spec := streams.ConsumerSpec{TaskType: typeRawDelay}
	if _, err := streams.EnsureConsumer(ctx, e.js, e.names, spec); err != nil {
		return nil, nil, err
	}
	nc, err := e.connect()
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	cons, err := js.Consumer(ctx, e.names.TaskStream(), e.names.ConsumerName(typeRawDelay, streams.PriorityNormal))
	if err != nil {
		return nil, nil, err
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, nil, err
	}
	due := time.Now().Add(e.cfg.delayLead).Truncate(time.Second).Add(time.Second)
	var mu sync.Mutex
	fired = make([]time.Duration, 0, n)
	received = make([]time.Duration, 0, n)
	finished := make(chan struct{})
	var wg sync.WaitGroup
	poll := jetstream.NextMaxWait(rawNextPoll)
	for range e.cfg.concurrency {
		wg.Go(func() {
			for {
				msg, err := it.Next(poll)
				if errors.Is(err, nats.ErrTimeout) {
					continue
				}
				if err != nil {
					return
				}
				now := time.Now()
				md, mdErr := msg.Metadata()
				_ = msg.Ack()
				mu.Lock()
				received = append(received, now.Sub(due))
				if mdErr == nil {
					fired = append(fired, md.Timestamp.Sub(due))
				}
				if len(received) == n {
					close(finished)
				}
				mu.Unlock()
			}
		})
	}
	at := "@at " + due.UTC().Format(time.RFC3339Nano)
	_, perr := e.publishRawMsgs(ctx, n, func(int) *nats.Msg {
		return &nats.Msg{Subject: e.names.ScheduleSubject(nuid.Next()), Data: e.payload, Header: nats.Header{
			jetstream.ScheduleHeader:       []string{at},
			jetstream.ScheduleTargetHeader: []string{target},
		}}
	})
	werr := perr
	if werr == nil {
		werr = e.waitFor(ctx, finished, "raw delayed messages")
	}
	it.Stop()
	wg.Wait()
	if werr != nil {
		return nil, nil, werr
	}
	mu.Lock()
	defer mu.Unlock()
	return fired, received, nil
}

type delayResult struct {
	due           time.Time
	early         int
	p50, p99, max time.Duration
}

// delayRun enqueues cfg.delayTasks tasks with At(due), due the same instant
// (a whole second at least cfg.delayLead ahead), and measures how late each
// handler starts relative to Task.ScheduledFor.
func (e *env) delayRun(ctx context.Context) (delayResult, error) {
	n := e.cfg.delayTasks
	var mu sync.Mutex
	lateness := make([]time.Duration, 0, n)
	early, unscheduled := 0, 0
	finished := make(chan struct{})
	w, stop, err := e.newWorker(e.tracking())
	if err != nil {
		return delayResult{}, err
	}
	w.HandleFunc(typeDelay, func(_ context.Context, t *framework.Task) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if t.ScheduledFor.IsZero() {
			unscheduled++
		}
		late := now.Sub(t.ScheduledFor)
		if late < 0 {
			early++
		}
		lateness = append(lateness, late)
		if len(lateness) == n {
			close(finished)
		}
		return nil
	})
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return delayResult{}, err
	}
	due := time.Now().Add(e.cfg.delayLead).Truncate(time.Second).Add(time.Second)
	if err := e.enqueueJobsClient(ctx, []framework.ClientOption{e.tracking()}, typeDelay, n, e.payload, framework.At(due)); err != nil {
		_ = stop()
		return delayResult{}, err
	}
	if late := time.Since(due); late > 0 {
		e.progress("delay: warning: enqueueing %d tasks ended %v after their due time", n, late)
	}
	werr := e.waitFor(ctx, finished, "delayed tasks")
	if err := errors.Join(werr, stop()); err != nil {
		return delayResult{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	if unscheduled > 0 {
		return delayResult{}, fmt.Errorf("bench: %d delayed tasks arrived without ScheduledFor", unscheduled)
	}
	res := delayResult{due: due, early: early}
	res.p50 = percentile(lateness, 50)
	res.p99 = percentile(lateness, 99)
	res.max = lateness[len(lateness)-1] // sorted by percentile
	return res, nil
}

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
		count = k
	}
	printResult(out, figPriority, fint("backlog", e.cfg.backlog), fms("critical_p99_ms", median(p99s)),
		fint("critical", count), fint("runs", e.cfg.runs))
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
