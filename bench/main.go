// Command bench measures jetflow against raw JetStream written the way a
// competent nats.go user writes it: on one embedded nats-server (file
// storage, in-process connections), and for the TCP figures on a
// standalone nats-server process the bench starts (or -url). It prints one
// summary line per figure.
//
// Usage:
//
//	go -C bench run . [-n 50000] [-runs 3] [-concurrency 32] [-only drain,enqueue,latency,…]
//	                  [-big] [-url nats://…] [-quick] [-cpuprofile cpu.out] [-memprofile mem.out] [-trace trace.out]
//	go -C bench run . -soak 10m [-soak-rate 5000] [-soak-dir DIR] [-url nats://…] [-cpuprofile cpu.out]
//
// Run "go -C bench run . -h" for the other flags (sizes, -state, -prefetch, and
// the diagnostic -side and -raw-header).
//
// Every figure is measured -runs times. Drain and enqueue run in rounds of
// raw then jetflow, back to back (raw, jetflow, raw, jetflow, …); each
// figure reports the median of each statistic over the runs, and the ratio
// is the median of the rounds' jetflow/raw ratios, so that machine noise
// hits both sides alike. The raw drain runs both with Consume and with
// Messages (nats.go defaults) and takes the faster. Progress goes to stderr;
// the summary lines go to stdout and start with "RESULT", followed by the
// figure's name and key=value pairs (extra keys follow the ones shown):
//
//	RESULT drain raw=<consume|messages> raw_per_s=… jetflow_per_s=… ratio=… … raw_dedup_per_s=… ratio_dedup=…
//	RESULT drain_tcp raw=… raw_per_s=… jetflow_per_s=… ratio=… … raw_dedup_per_s=… ratio_dedup=…
//	RESULT enqueue raw_per_s=… jetflow_per_s=… ratio=…
//	RESULT enqueue_one raw_per_s=… jetflow_per_s=… ratio=…
//	RESULT latency rate_per_s=1000 p50_ms=… p99_ms=…
//	RESULT latency_10k rate_per_s=10000 p50_ms=… p99_ms=… … raw_p99_ms=… max_send_ms=… slow_sends=…
//	RESULT latency_20k rate_per_s=20000 p50_ms=… p99_ms=… … raw_p99_ms=… max_send_ms=… slow_sends=…
//	RESULT latency_10k_tcp rate_per_s=10000 p50_ms=… p99_ms=… … raw_p99_ms=…  (standalone server over TCP)
//	RESULT latency_20k_tcp rate_per_s=20000 p50_ms=… p99_ms=… … raw_p99_ms=…  (standalone server over TCP)
//	RESULT delay tasks=5000 early=… p50_ms=… p99_ms=… max_ms=…
//	RESULT priority backlog=50000 critical_p99_ms=…
//	RESULT unique plain_us=… unique_us=… cost_us=… duplicate_us=…
//	RESULT ratelimit_cost plain_per_s=… limited_per_s=… ratio=…
//	RESULT ordering keys=1000 p1_per_s=… p4_per_s=… … unordered_per_s=…
//	RESULT batch size=100 per_s=… single_per_s=… ratio=… n=… runs=…
//	RESULT drain_types types=11 raw_per_s=… jetflow_per_s=… ratio=… one_type_per_s=… types_over_one=… one_stream_per_s=… one_stream_ratio=… one_priority_per_s=… one_priority_ratio=…
//	RESULT fairness noisy_backlog=100000 quiet_rate_per_s=50 quiet_p99_wait_ms=… unfair_p99_wait_ms=… … fair_drain_per_s=… plain_drain_per_s=…
//	RESULT backlog_1m tasks=1000000 enqueue_per_s=… enqueue_peak_rss_mb=… drain_per_s=… drain_ratio_to_100k=…  (with -big)
//	RESULT lanes_probe unordered_per_s=… … lanes16_single_ratio=… runs=…  (with -big or -only)
//
// With -soak DURATION the bench runs only the soak, against a three-node
// cluster with R3 streams: three nats-server processes it starts (or three
// servers in process with -soak-servers embedded, or the cluster at -url),
// so that its RSS figures are jetflow's side alone: a mix of tasks
// (four priorities, delayed, failing once, poison, calling a dependency
// through a circuit breaker with an outage in the middle) at -soak-rate per
// second, sampled every -soak-interval into a CSV under -soak-dir, then
//
//	RESULT soak minutes=… rate_per_s=… lost=0 dead=… poison=… p99_ms=… rss_start_mb=… rss_end_mb=… rss_growth_pct=…
//
// The command fails when a task was lost or the dead letters are not
// exactly the poison tasks. bench/soakplot draws the CSV.
//
// See docs/benchmarks.md for what each figure means and the method.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"runtime/trace"
	"strings"
	"time"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	if cfg.enqueueChild != "" {
		err = runEnqueueChild(ctx, cfg, os.Stdout)
	} else {
		err = runWithProfile(ctx, cfg, os.Stdout, os.Stderr)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// figure names, in the order they run.
const (
	figDrain    = "drain"
	figEnqueue  = "enqueue"
	figLatency  = "latency"
	figDelay    = "delay"
	figPriority = "priority"
	// Figures of the later features; they run after the core five.
	figDrainState = "drain_state"
	// The drain and enqueue figures with framework.WithDedup(false).
	figDrainNoDedup   = "drain_nodedup"
	figEnqueueNoDedup = "enqueue_nodedup"
	figDLQ            = "dlq"
	figWorkflow       = "workflow"
	figCluster        = "cluster_drain"
	figUnique         = "unique"
	figRateLimitCost  = "ratelimit_cost"
	figOrdering       = "ordering"
	figBatch          = "batch"
	// The drain with the consumers of other task types on the stream.
	figDrainTypes = "drain_types"
	// Fair-baseline figures: sequential enqueue, latency under load, the
	// drain against a standalone server over TCP, and (with -big) the
	// 1,000,000-task backlog.
	figEnqueueOne = "enqueue_one"
	figLatency10k = "latency_10k"
	figLatency20k = "latency_20k"
	figDrainTCP   = "drain_tcp"
	// The latency figures under load against the standalone server over
	// TCP, the deployment users run.
	figLatency10kTCP = "latency_10k_tcp"
	figLatency20kTCP = "latency_20k_tcp"
	figBacklog       = "backlog_1m"
	figWaitEvent     = "wait_event"
	figEarlyEvent    = "early_event"
)

// Values of -side.
const (
	sideRaw     = "raw"
	sideJetflow = "jetflow"
)

var allFigures = []string{figDrain, figEnqueue, figLatency, figDelay, figPriority,
	figEnqueueOne, figLatency10k, figLatency20k, figDrainTCP, figLatency10kTCP, figLatency20kTCP,
	figDrainNoDedup, figEnqueueNoDedup, figDrainState, figDLQ, figWorkflow, figCluster,
	figUnique, figRateLimitCost, figOrdering, figBatch, figDrainTypes, figWaitEvent, figEarlyEvent, figFanout, figDebounce, figFairness, figBacklog, figScaleOut, figLanes}

// bigFigures run only when -big is given or -only names them.
var bigFigures = map[string]bool{figBacklog: true, figScaleOut: true, figLanes: true}

// config holds the settings of one bench run.
type config struct {
	n           int // tasks per drain and enqueue measurement
	runs        int // repetitions of each measurement
	concurrency int // worker concurrency and raw goroutines
	window      int // in-flight async publishes
	prefetch    int // pull buffer of the drain (both sides); 0: jetflow's default
	payloadSize int // bytes of the drain/enqueue payload
	only        map[string]bool
	cpuProfile  string
	memProfile  string
	trace       string
	state       string // state tracking in the latency, delay and priority figures: "", "on" or "off"
	rawHeader   string // "", "msgid" or "id": a unique ID header on raw publishes
	side        string // "", sideRaw or sideJetflow: run one side of drain and enqueue only

	latencyRate   int           // tasks per second of the latency figure
	latencyDur    time.Duration // measured part of the latency figure
	latencyWarmup time.Duration // unmeasured start of the latency figure
	delayTasks    int           // tasks of the delay figure
	delayLead     time.Duration // minimum time between enqueue start and due time
	backlog       int           // low tasks of the priority figure
	fairBacklog   int           // noisy tasks of the fairness figure
	lowWork       time.Duration // busy work per low task in the priority figure
	criticalEvery time.Duration // interval between critical tasks
	timeout       time.Duration // bound on any single wait

	oneN      int    // tasks of the enqueue_one figure
	types     int    // other task types of the drain_types figure
	typeParts int    // task partitions of its deployment spread by type
	url       string // server of the TCP figures; "": a nats-server process the bench starts
	bigN      int    // tasks of the backlog_1m figure
	bigRefN   int    // tasks of its reference drain

	// Child mode of the backlog figure (hidden flags): enqueue n tasks of
	// childType to the server at enqueueChild, print the rate, exit.
	enqueueChild string
	childType    string

	// The soak (-soak): instead of the figures, run the soak for soak.
	soak         time.Duration
	soakRate     int           // tasks sent per second
	soakDir      string        // directory of the CSV; "": a new temporary directory
	soakInterval time.Duration // time between samples
	soakOutage   time.Duration // the dependency's outage, in the middle of the load
	soakOpen     time.Duration // the breaker's open timeout
	soakMaxDelay time.Duration // longest delay of the delayed tasks
	soakWarmup   time.Duration // start of the load left out of the latency and RSS figures; 0: automatic
	soakDrain    time.Duration // bound on the wait for the last tasks after the load
	soakWorkers  int           // workers, each on its own connection
	soakReplicas int           // replicas of the topology ensured on -url
	soakParts    int           // task partitions of the topology the soak ensures
	soakHeap     string        // write a heap profile here when the load ends
	soakServers  string        // without -url: "process" (three nats-server processes) or "embedded"
	maxTaskBytes int64         // MaxTaskBytes of the topology the bench ensures (0: unlimited)
}

func defaultConfig() config {
	return config{
		n:             50000,
		runs:          3,
		concurrency:   32,
		window:        4096,
		payloadSize:   64,
		latencyRate:   1000,
		latencyDur:    3 * time.Second,
		latencyWarmup: 500 * time.Millisecond,
		delayTasks:    5000,
		delayLead:     2 * time.Second,
		backlog:       50000,
		fairBacklog:   100000,
		lowWork:       60 * time.Microsecond,
		criticalEvery: time.Millisecond,
		timeout:       2 * time.Minute,
		oneN:          10000,
		types:         10,
		typeParts:     9,
		bigN:          1000000,
		bigRefN:       100000,
		soakRate:      5000,
		soakInterval:  10 * time.Second,
		soakOutage:    30 * time.Second,
		soakOpen:      10 * time.Second,
		soakMaxDelay:  time.Minute,
		soakDrain:     5 * time.Minute,
		soakWorkers:   2,
		soakReplicas:  3,
		soakServers:   soakServersProcess,
	}
}

// quickConfig shrinks everything to a smoke test of a few seconds.
func (c config) quick() config {
	c.n = 2000
	c.runs = 1
	c.latencyDur = 500 * time.Millisecond
	c.latencyWarmup = 100 * time.Millisecond
	c.delayTasks = 200
	c.delayLead = time.Second
	c.backlog = 2000
	c.fairBacklog = 2000
	c.timeout = time.Minute
	c.oneN = 500
	c.types = 2
	c.bigN = 20000
	c.bigRefN = 2000
	return c
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	def := defaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", def.n, "tasks per drain and enqueue measurement")
	runs := fs.Int("runs", def.runs, "repetitions of each measurement; the median is reported")
	conc := fs.Int("concurrency", def.concurrency, "worker concurrency, and goroutines acking on the raw side")
	window := fs.Int("window", def.window, "in-flight asynchronous publishes (both sides)")
	prefetch := fs.Int("prefetch", 0, "pull buffer of jetflow's worker in the drain figures (default: jetflow's); the raw side keeps nats.go's defaults")
	only := fs.String("only", "", "comma-separated figures to run: "+strings.Join(allFigures, ","))
	quick := fs.Bool("quick", false, "smoke test: small sizes, one run (other size flags are ignored)")
	backlog := fs.Int("backlog", def.backlog, "low-priority backlog of the priority figure")
	delayTasks := fs.Int("delay-tasks", def.delayTasks, "tasks of the delay figure")
	state := fs.String("state", "", `task state tracking in the latency, delay and priority figures: "on" or "off" (default: jetflow's default); drain and enqueue always run without`)
	lowWork := fs.Duration("low-work", def.lowWork, "busy CPU time of each low task of the priority figure (0: no-op)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	traceFile := fs.String("trace", "", "write a runtime execution trace of the whole run to this file (go tool trace; -pprof=sched gives the scheduler latency profile)")
	memProfile := fs.String("memprofile", "", "write an allocation profile of the whole run to this file (go tool pprof -sample_index=alloc_objects)")
	rawHeader := fs.String("raw-header", "", `give the raw drain's messages a unique ID header: "msgid" (Nats-Msg-Id, deduplicated like jetflow's) or "id" (a plain header); splits jetflow's overhead from the cost of its task ID (the enqueue figure's raw side always sends a Nats-Msg-Id, enqueue_nodedup's none)`)
	side := fs.String("side", "", "run only the raw or the jetflow side of drain and enqueue (to profile one of them)")
	oneN := fs.Int("one-n", def.oneN, "tasks of the enqueue_one figure (sequential enqueues)")
	types := fs.Int("types", def.types, "other task types whose consumers share the task stream in the drain_types figure")
	typeParts := fs.Int("type-partitions", def.typeParts, "task partitions of the deployment spread by type in the drain_types figure (2 to 64)")
	url := fs.String("url", "", "NATS server of the TCP figures (drain_tcp, backlog_1m), for the bench only: it purges its subjects there and creates and deletes a stream RAWDEDUP_TASKS (default: start nats-server "+natsServerVersion+" from PATH, GOBIN or GOPATH/bin)")
	big := fs.Bool("big", false, "also run backlog_1m: 1,000,000 tasks enqueued by a child process in one call, then drained (several minutes)")
	enqueueChild := fs.String("enqueue-child", "", "internal: enqueue -n tasks to this server URL and exit (the child process of backlog_1m)")
	childType := fs.String("child-type", typeBacklog, "internal: task type of -enqueue-child")
	soak := fs.Duration("soak", 0, "run the soak for this long instead of the figures: a 3-node R3 cluster (or -url), a mix of tasks at -soak-rate, a dependency outage in the middle; see docs/benchmarks.md")
	soakRate := fs.Int("soak-rate", def.soakRate, "tasks per second of the soak")
	soakDir := fs.String("soak-dir", "", "directory for the soak's CSV time series (default: a new temporary directory)")
	soakInterval := fs.Duration("soak-interval", def.soakInterval, "time between the soak's samples")
	soakOutage := fs.Duration("soak-outage", def.soakOutage, "length of the dependency outage in the middle of the soak")
	soakOpen := fs.Duration("soak-open", def.soakOpen, "open timeout of the soak dependency's circuit breaker")
	soakMaxDelay := fs.Duration("soak-max-delay", def.soakMaxDelay, "longest delay of the soak's delayed tasks (they wait 1 s to this)")
	soakWarmup := fs.Duration("soak-warmup", 0, "start of the soak left out of its latency and RSS figures (default: 30 % of -soak, at most 3m: past the 2-minute duplicate window and the longest delay)")
	soakDrain := fs.Duration("soak-drain", def.soakDrain, "bound on the wait for the soak's last tasks once the load ends")
	soakWorkers := fs.Int("soak-workers", def.soakWorkers, "workers of the soak, each on its own connection (with -concurrency each)")
	soakReplicas := fs.Int("soak-replicas", def.soakReplicas, "replicas of the topology the soak ensures on -url")
	soakParts := fs.Int("soak-partitions", 1, "task partitions of the topology the soak ensures on its servers (docs/partitions.md)")
	soakHeap := fs.String("soak-heapprofile", "", "write a heap profile (in use after a GC) to this file when the soak's load ends, before the drain")
	soakServers := fs.String("soak-servers", def.soakServers, `the soak's cluster without -url: "process", three nats-server processes the bench starts (a go install'ed binary, as the TCP figures use), so that the RSS figures are jetflow's alone; or "embedded", three servers in the bench process`)
	maxTaskBytes := fs.Int64("max-task-bytes", 0, "MaxTaskBytes of jetflow's task stream (0: unlimited, jetflow's default); a cap the run never reaches measures what the stream's limit check costs")
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "bench: unexpected arguments %q\n", fs.Args())
		return config{}, fmt.Errorf("bench: unexpected arguments")
	}
	c := def
	c.n, c.runs, c.concurrency, c.window, c.prefetch = *n, *runs, *conc, *window, *prefetch
	c.backlog, c.delayTasks, c.lowWork = *backlog, *delayTasks, *lowWork
	if *quick {
		c = c.quick()
	}
	c.cpuProfile = *cpuProfile
	c.state = *state
	c.memProfile = *memProfile
	c.trace = *traceFile
	c.rawHeader = *rawHeader
	c.side = *side
	c.url = *url
	c.enqueueChild, c.childType = *enqueueChild, *childType
	c.soak, c.soakRate, c.soakDir, c.soakInterval = *soak, *soakRate, *soakDir, *soakInterval
	c.soakOutage, c.soakOpen, c.soakMaxDelay, c.soakWarmup = *soakOutage, *soakOpen, *soakMaxDelay, *soakWarmup
	c.soakDrain, c.soakWorkers, c.soakReplicas, c.soakHeap = *soakDrain, *soakWorkers, *soakReplicas, *soakHeap
	c.soakParts = *soakParts
	c.soakServers = *soakServers
	c.maxTaskBytes = *maxTaskBytes
	if !*quick {
		c.oneN, c.types, c.typeParts = *oneN, *types, *typeParts
	}
	sel, err := parseOnly(*only, *big)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return config{}, err
	}
	c.only = sel
	if err := c.validate(); err != nil {
		fmt.Fprintln(stderr, err)
		return config{}, err
	}
	return c, nil
}

func parseOnly(s string, big bool) (map[string]bool, error) {
	sel := make(map[string]bool)
	if strings.TrimSpace(s) == "" {
		for _, f := range allFigures {
			sel[f] = big || !bigFigures[f]
		}
		return sel, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		known := false
		for _, g := range allFigures {
			known = known || f == g
		}
		if !known {
			return nil, fmt.Errorf("bench: unknown figure %q in -only (known: %s)", f, strings.Join(allFigures, ","))
		}
		sel[f] = true
	}
	return sel, nil
}

func (c config) validate() error {
	switch {
	case c.rawHeader != "" && c.rawHeader != "msgid" && c.rawHeader != "id":
		return fmt.Errorf("bench: -raw-header must be msgid or id")
	case c.side != "" && c.side != sideRaw && c.side != sideJetflow:
		return fmt.Errorf("bench: -side must be %q or %q", sideRaw, sideJetflow)
	case c.state != "" && c.state != "on" && c.state != "off":
		return fmt.Errorf("bench: -state must be on or off")
	case c.prefetch < 0 || c.prefetch > 256:
		return fmt.Errorf("bench: -prefetch must be 0 (default) to 256")
	case c.soak < 0:
		return fmt.Errorf("bench: -soak must be a positive duration")
	case c.soakServers != soakServersProcess && c.soakServers != soakServersEmbedded:
		return fmt.Errorf("bench: -soak-servers %q: want %s or %s", c.soakServers, soakServersProcess, soakServersEmbedded)
	case c.soak > 0 && (c.soakRate < 1 || c.soakInterval <= 0 || c.soakOpen <= 0 || c.soakDrain <= 0 || c.soakWorkers < 1 || c.soakReplicas < 1):
		return fmt.Errorf("bench: -soak-rate, -soak-interval, -soak-open, -soak-drain, -soak-workers and -soak-replicas must be positive")
	case c.soak > 0 && (c.soakOutage < 0 || c.soakOutage >= c.soak):
		return fmt.Errorf("bench: -soak-outage must be shorter than -soak")
	case c.soak > 0 && c.soakMaxDelay < 2*time.Second:
		return fmt.Errorf("bench: -soak-max-delay must be at least 2s (delays are drawn from 1 s up)")
	case c.soak > 0 && c.soakWarmup >= c.soak:
		return fmt.Errorf("bench: -soak-warmup must be shorter than -soak")
	case c.n < 1, c.runs < 1, c.concurrency < 1, c.window < 1, c.backlog < 1, c.delayTasks < 1, c.oneN < 1:
		return fmt.Errorf("bench: -n, -runs, -concurrency, -window, -backlog, -delay-tasks and -one-n must be ≥ 1")
	case c.types < 0 || c.types > 200:
		return fmt.Errorf("bench: -types must be 0 to 200")
	case c.typeParts < 2 || c.typeParts > 64:
		return fmt.Errorf("bench: -type-partitions must be 2 to 64")
	}
	return nil
}

func runWithProfile(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("bench: cpu profile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if cfg.trace != "" {
		f, err := os.Create(cfg.trace)
		if err != nil {
			return fmt.Errorf("bench: trace: %w", err)
		}
		defer f.Close()
		if err := trace.Start(f); err != nil {
			return fmt.Errorf("bench: trace: %w", err)
		}
		defer trace.Stop()
	}
	runner := run
	if cfg.soak > 0 {
		runner = runSoak
	}
	if err := runner(ctx, cfg, stdout, stderr); err != nil {
		return err
	}
	if cfg.memProfile != "" {
		f, err := os.Create(cfg.memProfile)
		if err != nil {
			return fmt.Errorf("bench: memory profile: %w", err)
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			return fmt.Errorf("bench: memory profile: %w", err)
		}
	}
	return nil
}
