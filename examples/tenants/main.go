// Command tenants gives tenants fair shares of a fleet of workers (package
// fairness) and caps the tasks of each tenant running at once across it
// (package keylimit), and measures what the cap costs.
//
// Each task carries its tenant as its key (framework.WithKey). Three
// workers, each on its own connection with 32 slots, drain -tasks tasks
// spread over -keys tenants, each task a call of -work (a simulated I/O
// wait), twice: once with keylimit.PerKey(-limit), once without a limit.
// It counts the tasks of each tenant running at once across the three
// workers, and prints
//
//	RESULT key_concurrency keys=K limit=L workers=3 max_observed=M tasks_per_s=R unlimited_per_s=U ratio=R/U
//
// where max_observed is the most tasks of one tenant seen running at once
// (never above the limit), and ratio the limited drain's rate over the
// unlimited one's, measured in the same run. It then caps the same tasks in
// lanes (framework.Ordering{Lanes: 16, PerKey: -limit}, tasks enqueued with
// framework.Ordered(tenant)): each lane's owner caps its tenants in memory,
// without a server write per task, and prints the same figures as
//
//	RESULT key_concurrency_lanes keys=K limit=L workers=3 max_observed=M tasks_per_s=R unlimited_per_s=U ratio=R/U
//
// It exits 1 when a tenant went over the limit or a task did not run.
//
// Then it shows fair shares: one tenant enqueues -noisy tasks with
// fairness.Enqueue, then three quiet tenants enqueue five each, and the
// same three workers, with fairness, drain them
// all. It prints
//
//	RESULT fairness workers=3 noisy_backlog=N quiet_tasks=15 quiet_last_start=S noisy_done_before=D
//
// where quiet_last_start is how many tasks had started when the last quiet
// task started (without fair shares it would be N+15: the quiet tasks would
// wait behind the whole backlog) and noisy_done_before how many of the
// noisy tenant's tasks had started by then. This drain has no per-tenant
// cap, to show what fair shares do alone. It exits 1 when the quiet tasks
// did not all start before half the backlog ran.
//
// Usage:
//
//	go run ./examples/tenants [-keys 1000] [-tasks 20000] [-limit 2] [-work 1ms] [-noisy 5000] [-timeout 2m] [-url nats://127.0.0.1:4222]
//
// With -url it runs against an existing server and prints the jetflow CLI
// command that lists the tenants running now.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/fairness"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

const (
	laneCount    = 16 // lanes of the capped type in the lanes drain
	workers      = 3
	quietTenants = 3 // tenants with a few tasks in the fair-shares drain
	quietTasks   = 5 // tasks of each
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "tenants:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	keys, tasks, limit int
	noisy              int
	work, timeout      time.Duration
	url                string
	cpuprofile         string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("tenants", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.keys, "keys", 1000, "tenants (task keys)")
	fs.IntVar(&c.tasks, "tasks", 20000, "tasks per drain, spread over the tenants")
	fs.IntVar(&c.limit, "limit", 2, "tasks of one tenant running at once, across the workers")
	fs.IntVar(&c.noisy, "noisy", 5000, "backlog of the noisy tenant in the fair-shares drain")
	fs.DurationVar(&c.work, "work", time.Millisecond, "what each task waits, as a call to another service would")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "deadline of each drain")
	fs.StringVar(&c.url, "url", "", "use the existing NATS server at this URL instead of starting one")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the limited drain (workers and, without -url, the server) to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.keys < 1 || c.tasks < c.keys || c.limit < 1 || c.limit > keylimit.MaxLimit || c.noisy < quietTenants*quietTasks {
		return c, fmt.Errorf("-keys %d, -tasks %d, -limit %d, -noisy %d: want keys ≥ 1, tasks ≥ keys, limit 1 to %d, noisy ≥ %d",
			c.keys, c.tasks, c.limit, c.noisy, keylimit.MaxLimit, quietTenants*quietTasks)
	}
	return c, nil
}

// gauge counts the tasks of each tenant running at once.
type gauge struct {
	mu      sync.Mutex
	running map[string]int
	most    int
	done    int
	all     chan struct{}
	want    int
	// started counts the tasks started, and startedOf per tenant;
	// lastStart is started when each tenant's last task started.
	started   int
	startedOf map[string]int
	lastStart map[string]int
}

func newGauge(want int) *gauge {
	return &gauge{running: make(map[string]int), all: make(chan struct{}), want: want,
		startedOf: make(map[string]int), lastStart: make(map[string]int)}
}

func (g *gauge) enter(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]++
	g.most = max(g.most, g.running[key])
	g.started++
	g.startedOf[key]++
	g.lastStart[key] = g.started
}

func (g *gauge) leave(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]--
	g.done++
	if g.done == g.want {
		close(g.all)
	}
}

// wait returns once every task ran, or an error when timeout passed or ctx
// ended first.
func (g *gauge) wait(ctx context.Context, taskType string, timeout time.Duration) error {
	select {
	case <-g.all:
		return nil
	case <-time.After(timeout):
		g.mu.Lock()
		defer g.mu.Unlock()
		return fmt.Errorf("%s: %d of %d tasks ran within %v", taskType, g.done, g.want, timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startWorkers starts three workers of taskType, each on its own connection
// with 32 slots, whose handler waits for work between g.enter and g.leave,
// and returns the function that stops them. With fair, each installs
// package fairness and the type takes fair shares.
func startWorkers(ctx context.Context, emb *testutil.Embedded, taskType string, g *gauge, work time.Duration, fair bool,
	opts []framework.HandlerOption, logger *slog.Logger) (stop func(), err error) {
	var ws []*framework.Worker
	stop = func() {
		for _, w := range ws {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = w.Shutdown(sctx)
			cancel()
			w.Conn().Close()
		}
	}
	for i := range workers {
		nc, err := emb.Connect(nats.Name(fmt.Sprintf("tenants-worker-%d", i+1)))
		if err != nil {
			stop()
			return nil, err
		}
		w, err := framework.NewWorker(nc, framework.WithConcurrency(32), framework.WithLogger(logger))
		if err != nil {
			nc.Close()
			stop()
			return nil, err
		}
		ws = append(ws, w)
		keylimit.Install(w)
		typeOpts := opts
		if fair {
			if err := fairness.Install(w); err != nil {
				stop()
				return nil, err
			}
			typeOpts = append(typeOpts[:len(typeOpts):len(typeOpts)], fairness.Shares(fairness.Options{}))
		}
		w.HandleFunc(taskType, func(ctx context.Context, t *framework.Task) error {
			g.enter(t.Key())
			defer g.leave(t.Key())
			select {
			case <-time.After(work):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, typeOpts...)
	}
	for _, w := range ws {
		if err := w.Start(ctx); err != nil {
			stop()
			return nil, err
		}
	}
	return stop, nil
}

// How a drain caps its tenants.
const (
	unlimited = iota
	capKV     // keylimit.PerKey: slots in a KV bucket
	capLanes  // Ordering{Lanes, PerKey}: in the lanes' owners' memory
)

// drain enqueues cfg.tasks tasks of taskType, then runs them on three
// workers, capped per tenant as mode says, and returns the drain's rate and
// the gauge.
func drain(ctx context.Context, emb *testutil.Embedded, cfg config, taskType string, mode int, logger *slog.Logger) (float64, *gauge, error) {
	client, err := framework.NewClient(emb.Conn)
	if err != nil {
		return 0, nil, err
	}
	defer dropConsumers(emb.Conn, taskType) // once the workers stopped
	specs := make([]framework.TaskSpec, cfg.tasks)
	for i := range specs {
		tenant := fmt.Sprintf("tenant-%04d", i%cfg.keys)
		specs[i] = framework.TaskSpec{Type: taskType, Payload: i, Options: []framework.EnqueueOption{framework.WithKey(tenant)}}
		if mode == capLanes {
			specs[i].Options = append(specs[i].Options, framework.Ordered(tenant)) // the tenant's lane
		}
	}
	g := newGauge(cfg.tasks)
	if mode == capLanes {
		return drainLanes(ctx, emb, cfg, client, specs, g, logger)
	}
	if _, err := client.EnqueueMany(ctx, specs); err != nil {
		return 0, nil, err
	}
	var opts []framework.HandlerOption
	switch mode {
	case capKV:
		opts = append(opts, keylimit.PerKey(cfg.limit))
	case capLanes:
		opts = append(opts, framework.WithOrdering(framework.Ordering{Lanes: 16, PerKey: cfg.limit}))
	}
	start := time.Now()
	stop, err := startWorkers(ctx, emb, taskType, g, cfg.work, false, opts, logger)
	if err != nil {
		return 0, nil, err
	}
	defer stop()
	if err := g.wait(ctx, taskType, cfg.timeout); err != nil {
		return 0, g, err
	}
	return float64(cfg.tasks) / time.Since(start).Seconds(), g, nil
}

// drainLanes runs specs in lanes: the workers start first and register, so
// that each pulls its share of the lanes (the first worker to start would
// otherwise take them all until the others' records reach it, within a
// second); the lane consumers are paused while the tasks are enqueued, and
// the rate counts from the end of the pause, as the other drains count from
// the workers' start with the backlog stored.
func drainLanes(ctx context.Context, emb *testutil.Embedded, cfg config, client *framework.Client, specs []framework.TaskSpec,
	g *gauge, logger *slog.Logger) (float64, *gauge, error) {
	taskType := specs[0].Type
	opts := []framework.HandlerOption{framework.WithOrdering(framework.Ordering{Lanes: laneCount, PerKey: cfg.limit})}
	stop, err := startWorkers(ctx, emb, taskType, g, cfg.work, false, opts, logger)
	if err != nil {
		return 0, nil, err
	}
	defer stop()
	op := inspect.New(client)
	for {
		f, err := op.Workers(ctx)
		if err != nil {
			return 0, nil, err
		}
		if f.ByType()[taskType] == workers {
			break
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return 0, nil, ctx.Err()
		}
	}
	js, err := jetstream.New(emb.Conn)
	if err != nil {
		return 0, nil, err
	}
	names := streams.MustNames("")
	for l := range laneCount {
		if _, err := js.PauseConsumer(ctx, names.TaskStream(), names.LaneConsumerName(taskType, laneCount, l), time.Now().Add(time.Minute)); err != nil {
			return 0, nil, err
		}
	}
	if _, err := client.EnqueueMany(ctx, specs); err != nil {
		return 0, nil, err
	}
	// Each worker reads the registry at most a second late.
	if !sleep(ctx, 1500*time.Millisecond) {
		return 0, nil, ctx.Err()
	}
	// The consumers resume at one deadline: the server wakes a consumer
	// whose pause ends at its deadline, where a resume request leaves it
	// waiting for its next pull request.
	start := time.Now().Add(100 * time.Millisecond)
	for l := range laneCount {
		if _, err := js.PauseConsumer(ctx, names.TaskStream(), names.LaneConsumerName(taskType, laneCount, l), start); err != nil {
			return 0, nil, err
		}
	}
	if err := g.wait(ctx, taskType, cfg.timeout); err != nil {
		return 0, g, err
	}
	return float64(cfg.tasks) / time.Since(start).Seconds(), g, nil
}

// dropConsumers deletes the consumers of taskType, so that the next drain
// runs on a stream with its own consumers only: the server checks every
// consumer of the stream on each acknowledgement, so consumers left by the
// drains before would slow the later ones.
func dropConsumers(nc *nats.Conn, taskType string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	stream, err := js.Stream(ctx, streams.MustNames("").TaskStream())
	if err != nil {
		return
	}
	names := streams.MustNames("")
	drop := []string{}
	for _, p := range streams.Priorities {
		drop = append(drop, names.ConsumerName(taskType, p))
	}
	for l := range laneCount {
		drop = append(drop, names.LaneConsumerName(taskType, laneCount, l))
	}
	for _, name := range drop {
		_ = stream.DeleteConsumer(ctx, name) // not found: a drain without lanes
	}
}

// sleep waits for d; false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// fairDrain stages cfg.noisy tasks of one tenant, then quietTasks of each
// of quietTenants others, with fairness.Enqueue, and runs them on three
// workers with fair shares. It returns the gauge and the quiet tenants'
// names.
func fairDrain(ctx context.Context, emb *testutil.Embedded, cfg config, taskType string, logger *slog.Logger) (*gauge, []string, error) {
	client, err := framework.NewClient(emb.Conn)
	if err != nil {
		return nil, nil, err
	}
	enqueue := func(tenant string, n int) error {
		for i := range n {
			if _, err := fairness.Enqueue(ctx, client, taskType, i, tenant); err != nil {
				return err
			}
		}
		return nil
	}
	if err := enqueue("tenant-noisy", cfg.noisy); err != nil {
		return nil, nil, err
	}
	var quiet []string
	for i := range quietTenants {
		tenant := fmt.Sprintf("tenant-quiet-%d", i+1)
		if err := enqueue(tenant, quietTasks); err != nil {
			return nil, nil, err
		}
		quiet = append(quiet, tenant)
	}
	g := newGauge(cfg.noisy + quietTenants*quietTasks)
	// No per-tenant cap here: a cap sets the noisy tenant's tasks aside,
	// which lets the others run too; this drain shows what fair shares do
	// alone.
	stop, err := startWorkers(ctx, emb, taskType, g, cfg.work, true, nil, logger)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	return g, quiet, g.wait(ctx, taskType, cfg.timeout)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	emb, err := testutil.Setup(ctx, cfg.url, streams.Config{}, nats.Name("tenants-producer"))
	if err != nil {
		return err
	}
	defer emb.Close()
	suffix := fmt.Sprintf("r%x", time.Now().UnixNano()&0xffffff)
	if url := emb.URL(); url != "" {
		fmt.Fprintf(stdout, "inspect it while it runs: go run ./cmd/jetflow -s %s keylimits ls\n", url)
	}
	plain, _, err := drain(ctx, emb, cfg, "tenants.plain."+suffix, unlimited, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "without a limit: %d tasks of %d tenants at %.0f/s\n", cfg.tasks, cfg.keys, plain)
	if cfg.cpuprofile != "" {
		f, err := os.Create(cfg.cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	limited, g, err := drain(ctx, emb, cfg, "tenants.limited."+suffix, capKV, logger)
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "with keylimit.PerKey(%d): at %.0f/s, at most %d of one tenant running at once\n", cfg.limit, limited, g.most)
	fmt.Fprintf(stdout, "RESULT key_concurrency keys=%d limit=%d workers=%d max_observed=%d tasks_per_s=%.0f unlimited_per_s=%.0f ratio=%.3f\n",
		cfg.keys, cfg.limit, workers, g.most, limited, plain, limited/plain)
	if g.most > cfg.limit {
		return fmt.Errorf("a tenant had %d tasks running at once, over its limit of %d", g.most, cfg.limit)
	}
	laned, lg, err := drain(ctx, emb, cfg, "tenants.lanes."+suffix, capLanes, logger)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "in 16 lanes, PerKey %d: at %.0f/s, at most %d of one tenant running at once\n", cfg.limit, laned, lg.most)
	fmt.Fprintf(stdout, "RESULT key_concurrency_lanes keys=%d limit=%d workers=%d max_observed=%d tasks_per_s=%.0f unlimited_per_s=%.0f ratio=%.3f\n",
		cfg.keys, cfg.limit, workers, lg.most, laned, plain, laned/plain)
	if lg.most > cfg.limit {
		return fmt.Errorf("in lanes, a tenant had %d tasks running at once, over its limit of %d", lg.most, cfg.limit)
	}

	fmt.Fprintf(stdout, "fair shares: tenant-noisy stages %d tasks, then %d quiet tenants %d each\n", cfg.noisy, quietTenants, quietTasks)
	fg, quiet, err := fairDrain(ctx, emb, cfg, "tenants.fair."+suffix, logger)
	if err != nil {
		return err
	}
	last, noisyBefore := 0, 0
	for _, tenant := range quiet {
		if fg.lastStart[tenant] > last {
			last = fg.lastStart[tenant]
		}
	}
	// The noisy tenant's tasks that started before the last quiet one.
	noisyBefore = last - quietTenants*quietTasks
	fmt.Fprintf(stdout, "the last quiet task started as task %d of %d (without fair shares: %d); %d noisy tasks started before it\n",
		last, fg.want, fg.want, noisyBefore)
	fmt.Fprintf(stdout, "RESULT fairness workers=%d noisy_backlog=%d quiet_tasks=%d quiet_last_start=%d noisy_done_before=%d\n",
		workers, cfg.noisy, quietTenants*quietTasks, last, noisyBefore)
	if last > fg.want/2 {
		return fmt.Errorf("fair shares: the last quiet task started as task %d of %d, after half the backlog", last, fg.want)
	}
	return nil
}
