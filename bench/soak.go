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
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// The soak's clusters without -url (-soak-servers).
const (
	soakServersProcess  = "process"  // three nats-server processes the bench starts
	soakServersEmbedded = "embedded" // three servers in the bench process
)

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
	serversMB   float64 // the RSS of the nats-server processes the bench started, 0 otherwise
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

// newSoakEnv returns the env of the soak: the cluster at -url, else three
// new nats-server processes (-soak-servers process, the default: the
// bench process then holds jetflow's side alone, and the servers' RSS is
// sampled apart) or a three-node embedded cluster (-soak-servers
// embedded), with the topology ensured at -soak-replicas (3 for the
// embedded cluster) and the soak's subjects purged.
func newSoakEnv(ctx context.Context, cfg config, stderr io.Writer) (*env, func(), error) {
	var e *env
	var shutdown func()
	var servers []*standalone
	if cfg.url == "" && cfg.soakServers == soakServersProcess {
		bin, err := findNATSServer()
		if err != nil {
			return nil, nil, fmt.Errorf("%w (or run the soak in process with -soak-servers %s)", err, soakServersEmbedded)
		}
		if servers, err = startCluster(ctx, bin, 3, stderr); err != nil {
			return nil, nil, err
		}
		urls := make([]string, len(servers))
		for i, s := range servers {
			urls[i] = s.url
		}
		cfg.url = strings.Join(urls, ",")
		fmt.Fprintf(stderr, "bench: soak: three %s processes on %s\n", bin, cfg.url)
	}
	if cfg.url == "" {
		var err error
		if e, shutdown, err = newClusterEnv(ctx, cfg, stderr); err != nil {
			return nil, nil, err
		}
	} else {
		e = &env{cfg: cfg, stderr: stderr, names: streams.MustNames(""), url: cfg.url, servers: servers}
		fail := func(err error) (*env, func(), error) { e.close(); stopAll(servers); return nil, nil, err }
		var err error
		if e.admin, err = e.connect(); err != nil {
			return fail(err)
		}
		if e.js, err = jetstream.New(e.admin); err != nil {
			return fail(fmt.Errorf("bench: jetstream: %w", err))
		}
		top := benchConfig // purges allowed: the soak purges its subjects below
		top.Replicas = cfg.soakReplicas
		top.Partitions = cfg.soakParts
		if _, err := streams.Ensure(ctx, e.js, top); err != nil {
			return fail(fmt.Errorf("bench: ensure R%d topology on %s: %w", cfg.soakReplicas, cfg.url, err))
		}
		if err := framework.EnsureBuckets(ctx, e.js); err != nil {
			return fail(fmt.Errorf("bench: ensure buckets: %w", err))
		}
		if e.stream, err = e.js.Stream(ctx, e.names.TaskStream()); err != nil {
			return fail(fmt.Errorf("bench: task stream: %w", err))
		}
		shutdown = func() { e.close(); stopAll(servers) }
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
		samples = append(samples, memPoint{at: smp.at, load: smp.load, rssMB: smp.rssMB, serversMB: smp.serversMB, liveMB: smp.liveMB, goroutines: smp.goroutines})
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
	srvStart, srvEnd := memWindows(samples, warmup, loadTime, func(p memPoint) float64 { return p.serversMB })
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
	if len(s.e.servers) > 0 {
		pairs = append(pairs, fcpu("servers_rss_start_mb", srvStart), fcpu("servers_rss_end_mb", srvEnd))
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
