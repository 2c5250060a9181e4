package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/workflow"
)

// The event-wait figures of issue 35 (workflow.WaitEvent):
//
//	RESULT wait_event runs=… waiting_rss_mb=… goroutines=… resume_p50_ms=… resume_p99_ms=… n_resumed=… signal_rate_per_s=… signal_p50_ms=… signal_p99_ms=… quiet_resume_p50_ms=… quiet_resume_p99_ms=… quiet_rate_per_s=… own_server=…
//	RESULT early_event runs=… lost=… completed=…
//
// wait_event starts one worker with a workflow whose first step waits for
// an event, then 2×-n runs (100,000 by default) that all reach the wait. It
// reads the process's RSS (after a garbage collection that returns freed
// memory to the system) and its goroutine count with the worker started and
// idle, and again once every run waits: waiting_rss_mb and goroutines are
// the increases. Then it signals waitSample/5 of the runs, spread over
// them, at waitQuietRate per second (quiet_resume_: one event at a time),
// then waitSample others at waitSignalRate per second, and measures from
// each Signal call to the start of the step after the wait (resume_), and
// the Signal calls themselves (signal_: the publish and the listing of the
// key's waiting runs). With a nats-server binary (or -url) the server runs in its own
// process, so that the RSS is the worker's (own_server=1); otherwise the
// embedded server's memory, holding the run documents and wait entries,
// counts too (own_server=0). Each of -runs rounds uses a prefix of its
// own, deleted afterwards; the medians are reported.
//
// early_event starts -n/5 runs (10,000 by default) that wait for an event
// of their own key, each event signalled just before its run starts (even
// runs) or just after Start returned, racing the wait's registration (odd
// runs), and counts the runs that completed: lost = runs − completed.

const (
	wfWaitName      = "bench-wait"
	wfEarlyName     = "bench-early"
	waitEventPrefix = "wfwait"
	// waitSample is the number of waiting runs signalled; waitSignalRate
	// the signals per second.
	waitSample     = 1000
	waitSignalRate = 200
	// waitQuietRate is the rate of the first, smaller set of signals
	// (waitSample/5), one event at a time.
	waitQuietRate = 20
)

// runWaitEvent measures and prints the wait_event figure.
func (e *env) runWaitEvent(ctx context.Context, out io.Writer) error {
	runs := 2 * e.cfg.n
	sample := min(waitSample, max(runs/10, 1))
	t, own := e, 0
	if _, err := findNATSServer(); err == nil || e.cfg.url != "" {
		var err error
		if t, err = e.tcpEnv(ctx); err != nil {
			return err
		}
		own = 1
	}
	var rssMB, gor, p50, p99, q50, q99, s50, s99 []float64
	for r := 1; r <= e.cfg.runs; r++ {
		res, err := t.waitEventRound(ctx, r, runs, sample)
		if err != nil {
			return fmt.Errorf("round %d: %w", r, err)
		}
		e.progress("wait_event run %d/%d: %d runs waiting (%+.1f MB RSS, %+d goroutines, %.1f s to reach the wait); resumed at %d/s: p50 %.2f ms, p99 %.2f ms; %d at %d/s: p50 %.2f ms, p99 %.2f ms (Signal calls p50 %.2f ms, p99 %.2f ms)",
			r, e.cfg.runs, runs, res.rssMB, res.goroutines, res.reach.Seconds(), waitQuietRate, res.quiet50, res.quiet99,
			sample, waitSignalRate, res.p50, res.p99, res.signal50, res.signal99)
		rssMB = append(rssMB, res.rssMB)
		gor = append(gor, float64(res.goroutines))
		p50, p99 = append(p50, res.p50), append(p99, res.p99)
		s50, s99 = append(s50, res.signal50), append(s99, res.signal99)
		q50, q99 = append(q50, res.quiet50), append(q99, res.quiet99)
	}
	printResult(out, figWaitEvent, fint("runs", runs), fcpu("waiting_rss_mb", median(rssMB)), fint("goroutines", int(median(gor))),
		fms("resume_p50_ms", median(p50)), fms("resume_p99_ms", median(p99)), fint("n_resumed", sample), fint("signal_rate_per_s", waitSignalRate),
		fms("signal_p50_ms", median(s50)), fms("signal_p99_ms", median(s99)),
		fms("quiet_resume_p50_ms", median(q50)), fms("quiet_resume_p99_ms", median(q99)), fint("quiet_rate_per_s", waitQuietRate),
		fint("own_server", own))
	return nil
}

type waitEventResult struct {
	rssMB      float64
	goroutines int
	reach      time.Duration
	p50, p99   float64
	// quiet50 and quiet99: the resume times at waitQuietRate.
	quiet50, quiet99 float64
	// signal50 and signal99 are percentiles of the Signal calls' times.
	signal50, signal99 float64
}

// waitEventRound runs one round of the wait_event figure under a prefix of
// its own.
func (e *env) waitEventRound(ctx context.Context, round, runs, sample int) (_ waitEventResult, err error) {
	prefix := waitEventPrefix + strconv.Itoa(round)
	e.dropPrefix(prefix)
	defer e.dropPrefix(prefix)
	if _, err := streams.Ensure(ctx, e.js, streams.Config{Prefix: prefix, Storage: jetstream.FileStorage}); err != nil {
		return waitEventResult{}, fmt.Errorf("bench: ensure %s topology: %w", prefix, err)
	}
	names := streams.MustNames(prefix)
	keyOf := func(i int) string { return "bench.wait." + strconv.Itoa(i) }

	p := &resumeProbe{signaled: make(map[int]time.Time)}
	def := workflow.New(wfWaitName)
	workflow.WaitEvent(def, "approval", func(_ context.Context, i int) (string, error) { return keyOf(i), nil })
	workflow.Step(def, "next", func(_ context.Context, i int) (struct{}, error) {
		p.resumed(i)
		return struct{}{}, nil
	}, workflow.After("approval"))

	waitType := workflow.StepTaskType(wfWaitName, "approval")
	var waiting atomic.Int64
	w, stop, err := e.newWorker(framework.WithPrefix(prefix), framework.WithHooks(framework.Hooks{
		Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionAck && t.Type == waitType {
				waiting.Add(1)
			}
		},
	}))
	if err != nil {
		return waitEventResult{}, err
	}
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()
	workflow.Register(w, def)
	if err := w.Start(ctx); err != nil {
		return waitEventResult{}, err
	}
	nc, err := e.connect()
	if err != nil {
		return waitEventResult{}, err
	}
	defer nc.Close()
	fc, err := framework.NewClient(nc, framework.WithPrefix(prefix), framework.WithMaxPending(e.cfg.window))
	if err != nil {
		return waitEventResult{}, err
	}
	wc, err := workflow.NewClient(fc, def)
	if err != nil {
		return waitEventResult{}, err
	}
	rss0, g0 := settledRSS(), runtime.NumGoroutine()

	start := time.Now()
	if err := e.startRuns(ctx, runs, func(i int) error {
		_, err := wc.Start(ctx, wfWaitName, i, workflow.WithRunID("w"+strconv.Itoa(i)))
		return err
	}); err != nil {
		return waitEventResult{}, err
	}
	if err := e.waitCount(ctx, &waiting, int64(runs), "runs reaching their wait"); err != nil {
		return waitEventResult{}, err
	}
	reach := time.Since(start)
	ws, err := e.js.Stream(ctx, names.WaitStream())
	if err != nil {
		return waitEventResult{}, fmt.Errorf("bench: wait stream: %w", err)
	}
	if n := ws.CachedInfo().State.Msgs; n != uint64(runs) {
		return waitEventResult{}, fmt.Errorf("bench: %d runs reached their wait but the wait stream holds %d entries", runs, n)
	}
	// The last acknowledgements and pull requests settle.
	time.Sleep(time.Second)
	rss1, g1 := settledRSS(), runtime.NumGoroutine()

	// Signal runs spread over all of them at a steady rate: a few at
	// waitQuietRate, then sample at waitSignalRate. Run k*step+1 of the
	// first set is next to run k*step of the second.
	step := runs / sample
	quiet, _, err := e.signalAt(ctx, wc, p, keyOf, waitQuietRate, max(sample/5, 1), func(k int) int { return k*step + 1 })
	if err != nil {
		return waitEventResult{}, err
	}
	lat, calls, err := e.signalAt(ctx, wc, p, keyOf, waitSignalRate, sample, func(k int) int { return k * step })
	if err != nil {
		return waitEventResult{}, err
	}
	return waitEventResult{
		rssMB:      (float64(rss1) - float64(rss0)) / (1 << 20),
		goroutines: g1 - g0,
		reach:      reach,
		p50:        ms(percentile(lat, 50)),
		p99:        ms(percentile(lat, 99)),
		quiet50:    ms(percentile(quiet, 50)),
		quiet99:    ms(percentile(quiet, 99)),
		signal50:   ms(percentile(calls, 50)),
		signal99:   ms(percentile(calls, 99)),
	}, nil
}

// resumeProbe times resumed runs: from the Signal of run i's event to the
// start of the step after its wait.
type resumeProbe struct {
	mu       sync.Mutex
	signaled map[int]time.Time
	lat      []time.Duration
	want     int
	done     chan struct{}
}

// expect starts a new set of n signals.
func (p *resumeProbe) expect(n int) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lat, p.want, p.done = make([]time.Duration, 0, n), n, make(chan struct{})
	return p.done
}

func (p *resumeProbe) signal(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.signaled[i] = time.Now()
}

// resumed records that the step after run i's wait started.
func (p *resumeProbe) resumed(i int) {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.signaled[i]
	if !ok {
		return
	}
	delete(p.signaled, i)
	p.lat = append(p.lat, now.Sub(at))
	if len(p.lat) == p.want {
		close(p.done)
	}
}

// signalAt signals the events of runs run(0) … run(n-1) at rate per
// second and waits until they resumed. It returns the resume times and the
// Signal calls' times.
func (e *env) signalAt(ctx context.Context, wc *workflow.Client, p *resumeProbe, keyOf func(int) string, rate, n int, run func(k int) int) (lat, calls []time.Duration, _ error) {
	done := p.expect(n)
	calls = make([]time.Duration, 0, n)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for k := range n {
		i := run(k)
		select {
		case <-tick.C:
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
		p.signal(i)
		t0 := time.Now()
		if _, err := wc.Signal(ctx, keyOf(i), map[string]string{"by": "bench"}); err != nil {
			return nil, nil, fmt.Errorf("bench: signal %s: %w", keyOf(i), err)
		}
		calls = append(calls, time.Since(t0))
	}
	if err := e.waitFor(ctx, done, fmt.Sprintf("%d runs signalled at %d/s to resume", n, rate)); err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lat, calls, nil
}

// runEarlyEvent measures and prints the early_event figure.
func (e *env) runEarlyEvent(ctx context.Context, out io.Writer) (err error) {
	runs := max(e.cfg.n/5, 10)
	const prefix = waitEventPrefix + "early"
	e.dropPrefix(prefix)
	defer e.dropPrefix(prefix)
	if _, err := streams.Ensure(ctx, e.js, streams.Config{Prefix: prefix, Storage: jetstream.FileStorage}); err != nil {
		return fmt.Errorf("bench: ensure %s topology: %w", prefix, err)
	}
	keyOf := func(i int) string { return "bench.early." + strconv.Itoa(i) }
	def := workflow.New(wfEarlyName)
	workflow.WaitEvent(def, "paid", func(_ context.Context, i int) (string, error) { return keyOf(i), nil })
	// A run is complete when its last step ran: counted in the step, which
	// runs on a task of its own or chained on the wait's (the default).
	var completed atomic.Int64
	var ran sync.Map
	workflow.Step(def, "done", func(_ context.Context, i int) (int, error) {
		if _, again := ran.LoadOrStore(i, true); !again {
			completed.Add(1)
		}
		return i, nil
	}, workflow.After("paid"))
	w, stop, err := e.newWorker(framework.WithPrefix(prefix))
	if err != nil {
		return err
	}
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()
	workflow.Register(w, def)
	if err := w.Start(ctx); err != nil { // creates the event streams
		return err
	}
	nc, err := e.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	fc, err := framework.NewClient(nc, framework.WithPrefix(prefix))
	if err != nil {
		return err
	}
	wc, err := workflow.NewClient(fc, def)
	if err != nil {
		return err
	}
	signal := func(i int) error {
		if _, err := wc.Signal(ctx, keyOf(i), i); err != nil {
			return fmt.Errorf("bench: signal %s: %w", keyOf(i), err)
		}
		return nil
	}
	if err := e.startRuns(ctx, runs, func(i int) error {
		if i%2 == 0 {
			if err := signal(i); err != nil {
				return err
			}
		}
		if _, err := wc.Start(ctx, wfEarlyName, i, workflow.WithRunID("e"+strconv.Itoa(i))); err != nil {
			return err
		}
		if i%2 == 1 {
			return signal(i)
		}
		return nil
	}); err != nil {
		return err
	}
	werr := e.waitCount(ctx, &completed, int64(runs), "runs to complete")
	if werr != nil && !errors.Is(werr, errNoProgress) {
		return werr
	}
	done := int(completed.Load())
	printResult(out, figEarlyEvent, fint("runs", runs), fint("lost", runs-done), fint("completed", done))
	if done < runs {
		return fmt.Errorf("bench: %d of %d runs whose event came early never completed: %w", runs-done, runs, werr)
	}
	return nil
}

// startRuns calls start(i) for i in [0, n) from -concurrency goroutines and
// returns the first error.
func (e *env) startRuns(ctx context.Context, n int, start func(i int) error) error {
	var next atomic.Int64
	errs := make(chan error, e.cfg.concurrency)
	var wg sync.WaitGroup
	for range e.cfg.concurrency {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := start(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("bench: start run: %w", err)
	}
	return ctx.Err()
}

// errNoProgress marks a count that stopped moving before its target.
var errNoProgress = errors.New("bench: no progress")

// waitCount waits until c reaches target. It fails when c did not move for
// the configured timeout.
func (e *env) waitCount(ctx context.Context, c *atomic.Int64, target int64, what string) error {
	last, since := c.Load(), time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		now := c.Load()
		switch {
		case now >= target:
			return nil
		case now != last:
			last, since = now, time.Now()
		case time.Since(since) > e.cfg.timeout:
			return fmt.Errorf("%w for %v waiting for %s: %d of %d", errNoProgress, e.cfg.timeout, what, now, target)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// settledRSS returns the RSS of the process after a garbage collection that
// returned the freed memory to the system: what the process holds, not the
// garbage of what it did.
func settledRSS() uint64 {
	debug.FreeOSMemory()
	return rss()
}

// dropPrefix deletes every stream of prefix (its topology, event streams
// and buckets), best effort.
func (e *env) dropPrefix(prefix string) {
	upper := strings.ToUpper(prefix) + "_"
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lister := e.js.StreamNames(ctx)
	var drop []string
	for name := range lister.Name() {
		if strings.HasPrefix(name, upper) || strings.HasPrefix(name, "KV_"+upper) {
			drop = append(drop, name)
		}
	}
	for _, name := range drop {
		_ = e.js.DeleteStream(ctx, name)
	}
}
