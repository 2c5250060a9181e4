package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// figSoak is the name of the soak's RESULT line.
const figSoak = "soak"

// Task types and dependency of the soak. Every kind of task except the
// dependency calls shares soakTypeTask; the dependency calls have their own
// type, because a breaker pauses the consumers of the types that declare it.
const (
	soakTypeTask = "bench.soak.task"
	soakTypeDep  = "bench.soak.dep"
	soakDep      = "bench-soak-dep"
)

// soakCSV is the file name of the soak's time series under -soak-dir.
const soakCSV = "soak.csv"

// soakKind is what a soak task does; it is a pure function of the task's
// index ([soakRun.kindOf]), so nothing per task is stored but two bits.
type soakKind uint8

const (
	kindPlain    soakKind = iota // runs and succeeds at once
	kindDelayed                  // enqueued with a delay of 1 s to -soak-max-delay, then succeeds
	kindFailOnce                 // fails its first attempt, succeeds on the retry
	kindPoison                   // fails permanently: must end as a dead letter
	kindDep                      // calls the dependency through its breaker
)

// Shares of the kinds, in parts per 10,000.
const (
	sharePoison   = 10   // 0.1 %
	shareFailOnce = 200  // 2 %
	shareDep      = 100  // 1 %
	shareDelayed  = 1000 // 10 %
)

var kindNames = [...]string{"plain", "delayed", "fail-once", "poison", "dependency"}

func (k soakKind) String() string { return kindNames[k] }

// soakPriorities are the four priorities, in the order of the CSV columns.
var soakPriorities = [4]framework.Priority{framework.PriorityCritical, framework.PriorityHigh,
	framework.PriorityNormal, framework.PriorityLow}

func priorityIndex(p framework.Priority) int {
	for i, q := range soakPriorities {
		if q == p {
			return i
		}
	}
	return len(soakPriorities) - 1
}

// soakSeed fixes the mix of kinds, priorities and delays: every run sends
// the same sequence.
const soakSeed = 0x6a6574666c6f77

// splitmix64 is a bijective 64-bit mixer (SplitMix64's finaliser): the
// per-task random draws are a hash of the index.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// soakDraw is what the index of a task decides about it.
type soakDraw struct {
	kind     soakKind
	priority framework.Priority
	delay    time.Duration // kindDelayed only
}

func drawTask(idx uint64, maxDelay time.Duration) soakDraw {
	h := splitmix64(soakSeed ^ idx)
	d := soakDraw{priority: soakPriorities[(h>>20)%4]}
	switch u := h % 10000; {
	case u < sharePoison:
		d.kind = kindPoison
	case u < sharePoison+shareFailOnce:
		d.kind = kindFailOnce
	case u < sharePoison+shareFailOnce+shareDep:
		d.kind = kindDep
	case u < sharePoison+shareFailOnce+shareDep+shareDelayed:
		d.kind = kindDelayed
		// 1 s to maxDelay, in whole milliseconds.
		span := max(uint64((maxDelay-time.Second)/time.Millisecond), 1)
		d.delay = time.Second + time.Duration((h>>32)%span)*time.Millisecond
	}
	return d
}

// bitset is a fixed-size set of task indexes, safe for concurrent use.
type bitset []atomic.Uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

// set adds i and reports whether it was already there.
func (b bitset) set(i uint64) (was bool) {
	m := uint64(1) << (i % 64)
	return b[i/64].Or(m)&m != 0
}

func (b bitset) has(i uint64) bool { return b[i/64].Load()&(1<<(i%64)) != 0 }

// histogram counts durations in logarithmic buckets 2 % wide from 1 µs to
// about 20 minutes: constant memory whatever the number of samples, with
// percentiles exact to 2 %.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histBuckets = 1060
	histGrowth  = 1.02
)

// histBounds[i] is the upper bound of bucket i.
var histBounds = func() [histBuckets]time.Duration {
	var b [histBuckets]time.Duration
	v := float64(time.Microsecond)
	for i := range b {
		b[i] = time.Duration(v)
		v *= histGrowth
	}
	return b
}()

func (h *histogram) add(d time.Duration) {
	// Binary search for the first bound ≥ d.
	lo, hi := 0, histBuckets-1
	for lo < hi {
		mid := (lo + hi) / 2
		if histBounds[mid] >= d {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	h.counts[lo]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the nearest-rank p-th percentile (0 < p ≤ 100), as the
// upper bound of its bucket, or 0 and false without samples.
func (h *histogram) quantile(p float64) (time.Duration, bool) {
	if h.n == 0 {
		return 0, false
	}
	rank := uint64(p/100*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return histBounds[i], true
		}
	}
	return histBounds[histBuckets-1], true
}

// soakLatencies are the latency histograms of one interval, or of the whole
// measured run.
type soakLatencies struct {
	start [4]histogram // enqueue → first handler start of immediate tasks, per priority
	all   histogram    // the same, every priority
	delay histogram    // due time → first handler start of delayed tasks
	dep   histogram    // enqueue → success of dependency tasks (includes the outage's holds)
}

func (l *soakLatencies) merge(o *soakLatencies) {
	for i := range l.start {
		l.start[i].merge(&o.start[i])
	}
	l.all.merge(&o.all)
	l.delay.merge(&o.delay)
	l.dep.merge(&o.dep)
}

// soakSample is one row of the time series.
type soakSample struct {
	at          time.Duration // since the load started
	load        bool          // taken while tasks were being sent
	outage      bool          // taken while the dependency was down
	sent        uint64
	rate        float64 // tasks sent per second since the previous sample
	succeeded   uint64
	poisonRan   uint64
	outstanding int64 // sent and not finished: waiting, delayed, running, held, retrying
	backlog     int64 // the consumers' pending and unacknowledged messages
	lat         soakLatencies
	rssMB       float64
	heapMB      float64 // Go heap in use now
	liveMB      float64 // Go heap live after the last garbage collection
	goroutines  int
}

// soakRun is the state of one soak.
type soakRun struct {
	cfg    config
	e      *env
	stderr io.Writer
	runID  string
	names  streams.Names

	capacity  uint64 // tasks the bitsets can hold
	confirmed bitset // enqueue acknowledged by the server
	done      bitset // succeeded, or (poison) failed permanently
	sent      atomic.Uint64
	succeeded atomic.Uint64
	poisonRan atomic.Uint64
	dups      atomic.Uint64 // successes of tasks that had succeeded already (at-least-once)
	early     atomic.Uint64 // delayed tasks started before their due time
	badTasks  atomic.Uint64 // tasks whose payload the soak did not write
	enqErrs   atomic.Uint64 // failed enqueue attempts (retried)
	opens     atomic.Uint64 // breaker transitions to open, every worker
	depDown   atomic.Bool

	t0 time.Time // start of the load: latency stamps are offsets from it

	mu  sync.Mutex
	cur soakLatencies // the current interval

	logMu sync.Mutex // serializes progress lines

	lastAt   time.Duration // previous sample (sampling goroutine only)
	lastSent uint64
}

// runSoak runs the soak: it starts a three-node cluster (or uses -url),
// drives -soak-rate tasks per second for -soak, waits for every task to end,
// checks that none was lost and prints
//
//	RESULT soak minutes=… rate_per_s=… lost=0 dead=… poison=… p99_ms=… rss_start_mb=… rss_end_mb=… …
//
// See docs/benchmarks.md for the mix of tasks and what is measured.
func runSoak(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	e, shutdown, err := newSoakEnv(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer shutdown()
	dir := cfg.soakDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "jetflow-soak-"); err != nil {
			return fmt.Errorf("bench: soak directory: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("bench: soak directory: %w", err)
	}
	capacity := uint64(float64(cfg.soakRate)*cfg.soak.Seconds()) + uint64(cfg.soakRate) + 1024
	s := &soakRun{
		cfg: cfg, e: e, stderr: stderr, names: e.names,
		runID:     strconv.FormatInt(time.Now().UnixNano(), 36),
		capacity:  capacity,
		confirmed: newBitset(int(capacity)),
		done:      newBitset(int(capacity)),
	}
	return s.run(ctx, filepath.Join(dir, soakCSV), stdout)
}

// newSoakEnv returns the env of the soak: a new three-node embedded cluster,
// or the cluster at -url, with the topology ensured at -soak-replicas (3 for
// the embedded cluster) and the soak's subjects purged.
func newSoakEnv(ctx context.Context, cfg config, stderr io.Writer) (*env, func(), error) {
	var e *env
	var shutdown func()
	if cfg.url == "" {
		var err error
		if e, shutdown, err = newClusterEnv(ctx, cfg, stderr); err != nil {
			return nil, nil, err
		}
	} else {
		e = &env{cfg: cfg, stderr: stderr, names: streams.MustNames(""), url: cfg.url}
		fail := func(err error) (*env, func(), error) { e.close(); return nil, nil, err }
		var err error
		if e.admin, err = e.connect(); err != nil {
			return fail(err)
		}
		if e.js, err = jetstream.New(e.admin); err != nil {
			return fail(fmt.Errorf("bench: jetstream: %w", err))
		}
		if _, err := streams.Ensure(ctx, e.js, streams.Config{Storage: jetstream.FileStorage, Replicas: cfg.soakReplicas}); err != nil {
			return fail(fmt.Errorf("bench: ensure R%d topology on %s: %w", cfg.soakReplicas, cfg.url, err))
		}
		if err := framework.EnsureBuckets(ctx, e.js); err != nil {
			return fail(fmt.Errorf("bench: ensure buckets: %w", err))
		}
		if e.stream, err = e.js.Stream(ctx, e.names.TaskStream()); err != nil {
			return fail(fmt.Errorf("bench: task stream: %w", err))
		}
		shutdown = e.close
	}
	// Leftovers of an interrupted soak on a shared server.
	dlq, err := e.js.Stream(ctx, e.names.DLQStream())
	if err != nil {
		shutdown()
		return nil, nil, fmt.Errorf("bench: dead-letter stream: %w", err)
	}
	for _, typ := range []string{soakTypeTask, soakTypeDep} {
		for _, p := range soakPriorities {
			if err := e.purge(ctx, e.names.TaskSubject(p, typ)); err != nil {
				shutdown()
				return nil, nil, err
			}
		}
		if err := dlq.Purge(ctx, jetstream.WithPurgeSubject(e.names.DLQSubject(typ))); err != nil {
			shutdown()
			return nil, nil, fmt.Errorf("bench: purge dead letters of %s: %w", typ, err)
		}
	}
	return e, shutdown, nil
}

// connectNode opens a connection for the i-th client or worker: to -url, or
// in process to node i of the embedded cluster (round robin), so that the
// load spreads over the nodes.
func (s *soakRun) connectNode(i int) (*nats.Conn, error) {
	if s.e.url != "" || s.e.cluster == nil {
		return s.e.connect()
	}
	node := s.e.cluster.Server(i % s.e.cluster.Size())
	if node == nil {
		return nil, fmt.Errorf("bench: cluster node %d is stopped", i%s.e.cluster.Size())
	}
	nc, err := testutil.ConnectServer(node.Server)
	if err != nil {
		return nil, fmt.Errorf("bench: connect to node %d: %w", i%s.e.cluster.Size(), err)
	}
	return nc, nil
}

// progress writes a line to stderr; the pacer, the senders, the outage
// and the sampler all report, so lines are serialized.
func (s *soakRun) progress(format string, args ...any) {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.stderr, "bench: soak: "+format+"\n", args...)
}

func (s *soakRun) run(ctx context.Context, csvPath string, stdout io.Writer) (err error) {
	cfg := s.cfg
	f, err := os.Create(csvPath)
	if err != nil {
		return fmt.Errorf("bench: soak csv: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("bench: soak csv: %w", cerr)
		}
	}()
	out := csv.NewWriter(f)
	if err := out.Write(soakHeader); err != nil {
		return fmt.Errorf("bench: soak csv: %w", err)
	}

	stopWorkers, err := s.startWorkers(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, stopWorkers()) }()
	nc, err := s.connectNode(0)
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, framework.WithMaxPending(cfg.window))
	if err != nil {
		return err
	}

	outageFrom := cfg.soak/2 - cfg.soakOutage/2
	outageTo := outageFrom + cfg.soakOutage
	warmup := cfg.soakWarmup
	if warmup <= 0 {
		warmup = min(3*time.Minute, cfg.soak*3/10)
	}
	s.progress("%s %s/%s, %d CPUs, GOMAXPROCS %d; %v at %d tasks/s, %d workers × concurrency %d, outage %v–%v, warm-up %v, csv %s",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		cfg.soak, cfg.soakRate, cfg.soakWorkers, cfg.concurrency, outageFrom, outageTo, warmup, csvPath)

	s.t0 = time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.soak)
	defer stopLoad()
	var load sync.WaitGroup
	load.Go(func() { s.drive(loadCtx, ctx, cl) })
	load.Go(func() { s.outage(loadCtx, outageFrom, outageTo) })

	// Sample every interval while loading, then while draining.
	var samples []memPoint    // the latencies are in the CSV, not kept
	total := &soakLatencies{} // after warm-up, during the load
	record := func(loading bool) error {
		if len(samples) > 0 && time.Since(s.t0)-samples[len(samples)-1].at < time.Second &&
			samples[len(samples)-1].load == loading {
			return nil // the last sample is fresh
		}
		smp := s.sample(ctx, loading)
		if loading && smp.at > warmup {
			total.merge(&smp.lat)
		}
		samples = append(samples, memPoint{at: smp.at, load: smp.load, rssMB: smp.rssMB, liveMB: smp.liveMB, goroutines: smp.goroutines})
		s.progress("%s", smp.summary())
		if err := out.Write(smp.row()); err != nil {
			return fmt.Errorf("bench: soak csv: %w", err)
		}
		out.Flush()
		return out.Error()
	}
	tick := time.NewTicker(cfg.soakInterval)
	defer tick.Stop()
	loading := true
	for loading {
		select {
		case <-tick.C:
		case <-loadCtx.Done():
			loading = false
		}
		if ctx.Err() != nil {
			load.Wait()
			return ctx.Err()
		}
		if loading {
			if err := record(true); err != nil {
				load.Wait()
				return err
			}
		}
	}
	load.Wait()
	loadTime := time.Since(s.t0)
	sent := s.sent.Load()
	// The last load sample covers the partial interval up to the end.
	if err := record(true); err != nil {
		return err
	}
	s.depDown.Store(false)
	if cfg.soakHeap != "" {
		if err := writeHeapProfile(cfg.soakHeap); err != nil {
			return err
		}
	}
	s.progress("load ended after %v: %d tasks sent (%.0f/s); waiting for delayed and held tasks (at most %v)",
		loadTime.Round(time.Millisecond), sent, float64(sent)/loadTime.Seconds(), cfg.soakDrain)

	// Drain: wait until every task ended, sampling on.
	drainCtx, cancelDrain := context.WithTimeout(ctx, cfg.soakDrain)
	defer cancelDrain()
	var verdict soakVerdict
	lastErr := ""
	for {
		verdict, err = s.check(drainCtx, sent)
		if err == nil && verdict.complete() {
			break
		}
		if err != nil && drainCtx.Err() == nil {
			// A server busy or electing a leader: try again until the
			// drain's deadline.
			if msg := err.Error(); msg != lastErr {
				s.progress("check: %v (retrying)", err)
				lastErr = msg
			}
		}
		if drainCtx.Err() != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			// Timed out: check once more with a fresh context, and report.
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			verdict, err = s.check(cctx, sent)
			cancel()
			if err != nil {
				return err
			}
			break
		}
		select {
		case <-tick.C:
			if err := record(false); err != nil {
				return err
			}
		case <-time.After(500 * time.Millisecond):
		case <-drainCtx.Done():
		}
	}
	if err := record(false); err != nil {
		return err
	}
	s.progress("drained %v after the load", (time.Since(s.t0) - loadTime).Round(time.Millisecond))

	rssStart, rssEnd := memWindows(samples, warmup, loadTime, func(p memPoint) float64 { return p.rssMB })
	liveStart, liveEnd := memWindows(samples, warmup, loadTime, func(p memPoint) float64 { return p.liveMB })
	growth := 0.0
	if rssStart > 0 {
		growth = (rssEnd - rssStart) / rssStart * 100
	}
	p50, _ := total.all.quantile(50)
	p99, _ := total.all.quantile(99)
	dp99, _ := total.delay.quantile(99)
	depP99, _ := total.dep.quantile(99)
	first, last := samples[0], samples[len(samples)-1]
	pairs := []kv{
		{"minutes", strconv.FormatFloat(cfg.soak.Minutes(), 'f', -1, 64)},
		frate("rate_per_s", float64(sent)/loadTime.Seconds()),
		fint("lost", verdict.lost),
		fint("dead", verdict.dead),
		fint("poison", verdict.poison),
		fms("p99_ms", ms(p99)),
		fcpu("rss_start_mb", rssStart),
		fcpu("rss_end_mb", rssEnd),
		fcpu("rss_growth_pct", growth),
		fcpu("live_start_mb", liveStart),
		fcpu("live_end_mb", liveEnd),
		frate("target_rate_per_s", float64(cfg.soakRate)),
		fint("tasks", int(sent)),
		fms("p50_ms", ms(p50)),
		fms("delay_p99_ms", ms(dp99)),
		fms("dep_p99_ms", ms(depP99)),
		fint("early", int(s.early.Load())),
		fint("dead_unexpected", verdict.deadUnexpected),
		fint("duplicates", int(s.dups.Load())),
		fint("enqueue_errors", int(s.enqErrs.Load())),
		fint("breaker_opens", int(s.opens.Load())),
		fint("goroutines_start", first.goroutines),
		fint("goroutines_end", last.goroutines),
		fcpu("warmup_s", warmup.Seconds()),
	}
	printResult(stdout, figSoak, pairs...)
	s.progress("time series in %s", csvPath)
	if growth >= 10 {
		s.progress("RSS grew %.1f %% after the warm-up (target < 10 %%)", growth)
	}
	var problems []string
	if verdict.lost > 0 {
		problems = append(problems, fmt.Sprintf("%d tasks lost (first: %s)", verdict.lost, strings.Join(verdict.missing, ", ")))
	}
	if verdict.dead != verdict.poison || verdict.deadUnexpected > 0 {
		problems = append(problems, fmt.Sprintf("%d dead letters for %d poison tasks (%d not poison)", verdict.dead, verdict.poison, verdict.deadUnexpected))
	}
	if n := s.early.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d delayed tasks started early", n))
	}
	if n := s.badTasks.Load(); n > 0 {
		problems = append(problems, fmt.Sprintf("%d tasks with a payload the soak did not write", n))
	}
	if len(problems) > 0 {
		return fmt.Errorf("bench: soak: %s", strings.Join(problems, "; "))
	}
	return nil
}

// startWorkers starts -soak-workers workers, each on its own connection
// (spread over the nodes), serving both soak types at every priority.
func (s *soakRun) startWorkers(ctx context.Context) (stop func() error, err error) {
	var stops []func() error
	stop = func() error {
		var errs []error
		for _, st := range stops {
			errs = append(errs, st())
		}
		return errors.Join(errs...)
	}
	hooks := framework.Hooks{
		BreakerStateChanged: func(_ context.Context, _ string, _, to framework.BreakerState) {
			if to == framework.BreakerOpen {
				s.opens.Add(1)
			}
		},
	}
	for i := range s.cfg.soakWorkers {
		nc, err := s.connectNode(i + 1)
		if err != nil {
			return nil, errors.Join(err, stop())
		}
		w, err := framework.NewWorker(nc, framework.WithConcurrency(s.cfg.concurrency), framework.WithHooks(hooks))
		if err == nil {
			_, err = breaker.Install(w, breaker.WithSettings(soakDep, breaker.Settings{OpenTimeout: s.cfg.soakOpen}))
		}
		if err != nil {
			nc.Close()
			return nil, errors.Join(err, stop())
		}
		w.HandleFunc(soakTypeTask, s.handleTask)
		w.HandleFunc(soakTypeDep, s.handleDep, breaker.WithDependencies(soakDep))
		stops = append(stops, func() error {
			defer nc.Close()
			sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := w.Shutdown(sctx); err != nil && !errors.Is(err, framework.ErrWorkerClosed) {
				return fmt.Errorf("bench: worker shutdown: %w", err)
			}
			return nil
		})
		if err := w.Start(ctx); err != nil {
			return nil, errors.Join(err, stop())
		}
	}
	return stop, nil
}

// soakPayload is what a soak task carries: its index, when it was sent and
// when it is due (0 for immediate tasks), both offsets from the start of
// the load in nanoseconds, as "idx,sent,due".
type soakPayload struct {
	idx       uint64
	sent, due time.Duration
}

func (p soakPayload) encode() []byte {
	b := strconv.AppendUint(nil, p.idx, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, int64(p.sent), 10)
	b = append(b, ',')
	return strconv.AppendInt(b, int64(p.due), 10)
}

func parseSoakPayload(b []byte, capacity uint64) (soakPayload, error) {
	f := strings.Split(string(b), ",")
	if len(f) != 3 {
		return soakPayload{}, fmt.Errorf("bench: soak payload %q: want idx,sent,due", b)
	}
	idx, err1 := strconv.ParseUint(f[0], 10, 64)
	sent, err2 := strconv.ParseInt(f[1], 10, 64)
	due, err3 := strconv.ParseInt(f[2], 10, 64)
	if err := errors.Join(err1, err2, err3); err != nil {
		return soakPayload{}, fmt.Errorf("bench: soak payload %q: %w", b, err)
	}
	if idx >= capacity {
		return soakPayload{}, fmt.Errorf("bench: soak payload %q: index out of range", b)
	}
	return soakPayload{idx: idx, sent: time.Duration(sent), due: time.Duration(due)}, nil
}

var (
	errFailOnce = errors.New("bench: soak task fails its first attempt")
	errPoison   = errors.New("bench: soak poison task")
	errDepDown  = errors.New("bench: soak dependency down")
)

// handleTask runs every kind but the dependency calls.
func (s *soakRun) handleTask(_ context.Context, t *framework.Task) error {
	now := time.Since(s.t0)
	p, err := parseSoakPayload(t.Payload, s.capacity)
	if err != nil {
		s.badTasks.Add(1)
		return framework.Permanent(err)
	}
	d := drawTask(p.idx, s.cfg.soakMaxDelay)
	if t.Attempt == 1 {
		s.mu.Lock()
		if p.due > 0 {
			if now < p.due {
				s.early.Add(1)
			}
			s.cur.delay.add(now - p.due)
		} else {
			s.cur.start[priorityIndex(t.Priority)].add(now - p.sent)
			s.cur.all.add(now - p.sent)
		}
		s.mu.Unlock()
	}
	switch d.kind {
	case kindPoison:
		s.finish(p.idx, true)
		return framework.Permanent(errPoison)
	case kindFailOnce:
		if t.Attempt == 1 {
			return errFailOnce
		}
	}
	s.finish(p.idx, false)
	return nil
}

// handleDep calls the dependency through its breaker: while it is down the
// calls fail, the breaker opens, and the tasks are held until it closes.
func (s *soakRun) handleDep(ctx context.Context, t *framework.Task) error {
	p, err := parseSoakPayload(t.Payload, s.capacity)
	if err != nil {
		s.badTasks.Add(1)
		return framework.Permanent(err)
	}
	if err := breaker.Call(ctx, soakDep, func(context.Context) error {
		if s.depDown.Load() {
			return errDepDown
		}
		return nil
	}); err != nil {
		return err
	}
	now := time.Since(s.t0)
	s.mu.Lock()
	s.cur.dep.add(now - p.sent)
	s.mu.Unlock()
	s.finish(p.idx, false)
	return nil
}

// finish records that task idx ended: succeeded, or (poison) failed for
// good.
func (s *soakRun) finish(idx uint64, poison bool) {
	if s.done.set(idx) {
		s.dups.Add(1)
		return
	}
	if poison {
		s.poisonRan.Add(1)
	} else {
		s.succeeded.Add(1)
	}
}

// drive sends tasks at -soak-rate until ctx ends: every 10 ms the tasks due
// by then go out in one EnqueueMany, handed to one of a few senders so that a
// slow acknowledgement does not stall the pace. A sender that falls behind
// blocks the pacer, and the achieved rate drops below the target.
//
// The pace stops when ctx ends; the enqueues under way go on under sendCtx,
// so that no task counted as sent is cut off at the end of the load.
func (s *soakRun) drive(ctx, sendCtx context.Context, cl *framework.Client) {
	const senders = 4
	batches := make(chan [2]uint64, senders)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for b := range batches {
				s.send(sendCtx, cl, b[0], b[1])
			}
		})
	}
	defer func() { close(batches); wg.Wait() }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var next uint64
	maxBatch := uint64(max(s.cfg.soakRate/10, 1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due := min(uint64(time.Since(start).Seconds()*float64(s.cfg.soakRate)), s.capacity)
		for next < due {
			end := min(due, next+maxBatch)
			select {
			case batches <- [2]uint64{next, end}:
			case <-ctx.Done():
				return
			}
			next = end
		}
	}
}

// send enqueues tasks [from, to), retrying the failed ones with the same
// IDs (deduplicated by the server) until they are stored or ctx ends.
func (s *soakRun) send(ctx context.Context, cl *framework.Client, from, to uint64) {
	jobs := make([]framework.TaskSpec, 0, to-from)
	idxs := make([]uint64, 0, to-from)
	sent := time.Since(s.t0)
	for i := from; i < to; i++ {
		d := drawTask(i, s.cfg.soakMaxDelay)
		p := soakPayload{idx: i, sent: sent}
		typ := soakTypeTask
		opts := []framework.EnqueueOption{framework.WithID(s.runID + "-" + strconv.FormatUint(i, 10)), framework.WithPriority(d.priority)}
		switch d.kind {
		case kindDelayed:
			p.due = sent + d.delay
			opts = append(opts, framework.In(d.delay))
		case kindDep:
			typ = soakTypeDep
		}
		jobs = append(jobs, framework.TaskSpec{Type: typ, Payload: p.encode(), Options: opts})
		idxs = append(idxs, i)
	}
	s.sent.Add(to - from)
	for attempt := 0; len(jobs) > 0; attempt++ {
		_, err := cl.EnqueueMany(ctx, jobs)
		var be *framework.BatchError
		switch {
		case err == nil:
			for _, i := range idxs {
				s.confirmed.set(i)
			}
			return
		case errors.As(err, &be):
			var retryJobs []framework.TaskSpec
			var retryIdxs []uint64
			for k, i := range idxs {
				if _, failed := be.Errors[k]; failed {
					retryJobs, retryIdxs = append(retryJobs, jobs[k]), append(retryIdxs, i)
				} else {
					s.confirmed.set(i)
				}
			}
			s.enqErrs.Add(uint64(len(retryJobs)))
			if attempt == 0 {
				s.progress("enqueue: %d of %d tasks failed, retrying: %v", len(retryJobs), len(jobs), err)
			}
			jobs, idxs = retryJobs, retryIdxs
		default:
			s.enqErrs.Add(uint64(len(jobs)))
			if attempt == 0 {
				s.progress("enqueue of %d tasks failed, retrying: %v", len(jobs), err)
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			// Interrupted: the tasks left are not confirmed, and the
			// final check leaves them out.
			return
		}
	}
}

// outage takes the dependency down from from to to (offsets from the start
// of the load).
func (s *soakRun) outage(ctx context.Context, from, to time.Duration) {
	wait := func(until time.Duration) bool {
		t := time.NewTimer(time.Until(s.t0.Add(until)))
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !wait(from) {
		return
	}
	s.depDown.Store(true)
	s.progress("dependency down")
	defer func() {
		s.depDown.Store(false)
		s.progress("dependency up")
	}()
	wait(to)
}

// sample takes one row of the time series and resets the interval's
// latencies.
func (s *soakRun) sample(ctx context.Context, loading bool) soakSample {
	smp := soakSample{at: time.Since(s.t0), load: loading, outage: s.depDown.Load()}
	s.mu.Lock()
	smp.lat = s.cur
	s.cur = soakLatencies{}
	s.mu.Unlock()
	smp.sent = s.sent.Load()
	if dt := smp.at - s.lastAt; dt > 0 {
		smp.rate = float64(smp.sent-s.lastSent) / dt.Seconds()
	}
	s.lastAt, s.lastSent = smp.at, smp.sent
	smp.succeeded = s.succeeded.Load()
	smp.poisonRan = s.poisonRan.Load()
	smp.outstanding = int64(smp.sent) - int64(smp.succeeded) - int64(smp.poisonRan)
	for _, typ := range []string{soakTypeTask, soakTypeDep} {
		for _, p := range soakPriorities {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := s.e.js.Consumer(cctx, s.names.TaskStream(), s.names.ConsumerName(typ, p))
			cancel()
			if err != nil {
				smp.backlog = -1
				continue
			}
			if smp.backlog >= 0 {
				ci := c.CachedInfo()
				smp.backlog += int64(ci.NumPending) + int64(ci.NumAckPending)
			}
		}
	}
	smp.rssMB = float64(rss()) / (1 << 20)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp.heapMB = float64(ms.HeapInuse) / (1 << 20)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() == metrics.KindUint64 {
		smp.liveMB = float64(live[0].Value.Uint64()) / (1 << 20)
	}
	smp.goroutines = runtime.NumGoroutine()
	return smp
}

// soakHeader names the CSV columns; latencies are in milliseconds and empty
// when the interval had no sample.
var soakHeader = []string{"elapsed_s", "load", "outage", "sent", "sent_per_s", "succeeded", "dead", "outstanding", "backlog",
	"critical_p50_ms", "critical_p99_ms", "high_p50_ms", "high_p99_ms", "normal_p50_ms", "normal_p99_ms",
	"low_p50_ms", "low_p99_ms", "all_p50_ms", "all_p99_ms", "delay_p99_ms", "dep_p99_ms", "rss_mb", "heap_mb", "live_mb", "goroutines"}

func (smp *soakSample) row() []string {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	q := func(h *histogram, p float64) string {
		d, ok := h.quantile(p)
		if !ok {
			return ""
		}
		return strconv.FormatFloat(ms(d), 'f', 3, 64)
	}
	r := []string{strconv.FormatFloat(smp.at.Seconds(), 'f', 1, 64), b(smp.load), b(smp.outage),
		strconv.FormatUint(smp.sent, 10), strconv.FormatFloat(smp.rate, 'f', 0, 64), strconv.FormatUint(smp.succeeded, 10),
		strconv.FormatUint(smp.poisonRan, 10), strconv.FormatInt(smp.outstanding, 10), strconv.FormatInt(smp.backlog, 10)}
	for i := range smp.lat.start {
		r = append(r, q(&smp.lat.start[i], 50), q(&smp.lat.start[i], 99))
	}
	r = append(r, q(&smp.lat.all, 50), q(&smp.lat.all, 99), q(&smp.lat.delay, 99), q(&smp.lat.dep, 99),
		strconv.FormatFloat(smp.rssMB, 'f', 1, 64), strconv.FormatFloat(smp.heapMB, 'f', 1, 64),
		strconv.FormatFloat(smp.liveMB, 'f', 1, 64), strconv.Itoa(smp.goroutines))
	return r
}

func (smp *soakSample) summary() string {
	p99, _ := smp.lat.all.quantile(99)
	c99, _ := smp.lat.start[0].quantile(99)
	phase := "load"
	if !smp.load {
		phase = "drain"
	}
	return fmt.Sprintf("%6.0fs %-5s sent %d, outstanding %d, backlog %d, dead %d; p99 %.2f ms (critical %.2f ms); rss %.0f MB, heap %.0f MB (live %.0f MB), %d goroutines",
		smp.at.Seconds(), phase, smp.sent, smp.outstanding, smp.backlog, smp.poisonRan, ms(p99), ms(c99), smp.rssMB, smp.heapMB, smp.liveMB, smp.goroutines)
}

// memPoint is what the end of the run needs of a sample.
type memPoint struct {
	at         time.Duration
	load       bool
	rssMB      float64
	liveMB     float64
	goroutines int
}

// memWindows returns the median of val over the load samples in the minute
// after the warm-up and over those in the load's last minute (each window
// at most half of what follows the warm-up, and at least one sample).
func memWindows(samples []memPoint, warmup, loadEnd time.Duration, val func(memPoint) float64) (start, end float64) {
	window := min(time.Minute, (loadEnd-warmup)/2)
	var a, b []float64
	for _, smp := range samples {
		if !smp.load {
			continue
		}
		if smp.at >= warmup && smp.at < warmup+window {
			a = append(a, val(smp))
		}
		if smp.at > loadEnd-window {
			b = append(b, val(smp))
		}
	}
	if len(a) == 0 || len(b) == 0 {
		// Too short for windows: the first and last load samples.
		var load []float64
		for _, smp := range samples {
			if smp.load {
				load = append(load, val(smp))
			}
		}
		if len(load) == 0 {
			return 0, 0
		}
		return load[0], load[len(load)-1]
	}
	return median(a), median(b)
}

// soakVerdict is the end-of-run accounting.
type soakVerdict struct {
	lost           int      // confirmed non-poison tasks that never succeeded, plus poison ones never dead-lettered
	missing        []string // the first few lost tasks, for the report
	dead           int      // dead letters of the soak's types
	deadUnexpected int      // dead letters of tasks that were not poison
	poison         int      // poison tasks sent and confirmed
	pending        int      // tasks not yet ended
}

func (v soakVerdict) complete() bool { return v.pending == 0 && v.dead-v.deadUnexpected >= v.poison }

// check counts, over the first sent tasks, those that have not ended and
// the dead letters, read back from the dead-letter stream.
func (s *soakRun) check(ctx context.Context, sent uint64) (soakVerdict, error) {
	var v soakVerdict
	for i := range sent {
		if !s.confirmed.has(i) {
			continue // never stored (the enqueue gave up): not a task of the run
		}
		k := drawTask(i, s.cfg.soakMaxDelay).kind
		if k == kindPoison {
			v.poison++
		}
		if !s.done.has(i) {
			v.pending++
			if len(v.missing) < 10 {
				v.missing = append(v.missing, fmt.Sprintf("%s-%d (%s)", s.runID, i, k))
			}
		}
	}
	if v.pending > 0 {
		// Not finished yet: the dead letters are read once every task ended.
		v.lost = v.pending
		return v, nil
	}
	dead, unexpected, err := s.deadLetters(ctx)
	if err != nil {
		return v, err
	}
	v.dead, v.deadUnexpected = dead, unexpected
	v.lost = v.pending + max(v.poison-(dead-unexpected), 0)
	return v, nil
}

// deadLetters reads the dead-letter records of the soak's types, one by
// one with "next message on subject" gets (no consumer to set up), and
// returns their number and how many are not poison tasks of this run.
func (s *soakRun) deadLetters(ctx context.Context) (total, unexpected int, err error) {
	dlq, err := s.e.js.Stream(ctx, s.names.DLQStream())
	if err != nil {
		return 0, 0, fmt.Errorf("bench: dead-letter stream: %w", err)
	}
	prefix := s.runID + "-"
	for _, subject := range []string{s.names.DLQSubject(soakTypeTask), s.names.DLQSubject(soakTypeDep)} {
		for seq := uint64(1); ; {
			msg, err := dlq.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				break
			}
			if err != nil {
				return 0, 0, fmt.Errorf("bench: read dead letters: %w", err)
			}
			total++
			id := msg.Header.Get(framework.HeaderTaskID)
			idx, err := strconv.ParseUint(strings.TrimPrefix(id, prefix), 10, 64)
			if !strings.HasPrefix(id, prefix) || err != nil || idx >= s.capacity || drawTask(idx, s.cfg.soakMaxDelay).kind != kindPoison {
				unexpected++
			}
			seq = msg.Sequence + 1
		}
	}
	return total, unexpected, nil
}

// writeHeapProfile writes the in-use heap, after a garbage collection, to
// path (go tool pprof -sample_index=inuse_space).
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("bench: heap profile: %w", err)
	}
	return nil
}
