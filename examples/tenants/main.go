// Command tenants caps the tasks of each tenant running at once across a
// fleet of workers (package keylimit), and measures what the cap costs.
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
// unlimited one's, measured in the same run. It exits 1 when a tenant went
// over the limit or a task did not run.
//
// Usage:
//
//	go run ./examples/tenants [-keys 1000] [-tasks 20000] [-limit 2] [-work 1ms] [-timeout 2m] [-url nats://127.0.0.1:4222]
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

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/keylimit"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

const workers = 3

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
	fs.DurationVar(&c.work, "work", time.Millisecond, "what each task waits, as a call to another service would")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "deadline of each drain")
	fs.StringVar(&c.url, "url", "", "use the existing NATS server at this URL instead of starting one")
	fs.StringVar(&c.cpuprofile, "cpuprofile", "", "write a CPU profile of the limited drain (workers and, without -url, the server) to this file")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.keys < 1 || c.tasks < c.keys || c.limit < 1 || c.limit > keylimit.MaxLimit {
		return c, fmt.Errorf("-keys %d, -tasks %d, -limit %d: want keys ≥ 1, tasks ≥ keys, limit 1 to %d", c.keys, c.tasks, c.limit, keylimit.MaxLimit)
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
}

func (g *gauge) enter(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running[key]++
	g.most = max(g.most, g.running[key])
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

// drain enqueues cfg.tasks tasks of taskType, then runs them on three
// workers and returns the drain's rate and the gauge.
func drain(ctx context.Context, emb *testutil.Embedded, cfg config, taskType string, limited bool, logger *slog.Logger) (float64, *gauge, error) {
	client, err := framework.NewClient(emb.Conn)
	if err != nil {
		return 0, nil, err
	}
	specs := make([]framework.TaskSpec, cfg.tasks)
	for i := range specs {
		specs[i] = framework.TaskSpec{Type: taskType, Payload: i,
			Options: []framework.EnqueueOption{framework.WithKey(fmt.Sprintf("tenant-%04d", i%cfg.keys))}}
	}
	if _, err := client.EnqueueMany(ctx, specs); err != nil {
		return 0, nil, err
	}
	g := &gauge{running: make(map[string]int), all: make(chan struct{}), want: cfg.tasks}
	var ws []*framework.Worker
	defer func() {
		for _, w := range ws {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_ = w.Shutdown(sctx)
			cancel()
			w.Conn().Close()
		}
	}()
	var opts []framework.HandlerOption
	if limited {
		opts = append(opts, keylimit.PerKey(cfg.limit))
	}
	for i := range workers {
		nc, err := emb.Connect(nats.Name(fmt.Sprintf("tenants-worker-%d", i+1)))
		if err != nil {
			return 0, nil, err
		}
		w, err := framework.NewWorker(nc, framework.WithConcurrency(32), framework.WithLogger(logger))
		if err != nil {
			nc.Close()
			return 0, nil, err
		}
		keylimit.Install(w)
		w.HandleFunc(taskType, func(ctx context.Context, t *framework.Task) error {
			g.enter(t.Key())
			defer g.leave(t.Key())
			select {
			case <-time.After(cfg.work):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}, opts...)
		ws = append(ws, w)
	}
	start := time.Now()
	for _, w := range ws {
		if err := w.Start(ctx); err != nil {
			return 0, nil, err
		}
	}
	select {
	case <-g.all:
	case <-time.After(cfg.timeout):
		return 0, g, fmt.Errorf("%s: %d of %d tasks ran within %v", taskType, g.done, cfg.tasks, cfg.timeout)
	case <-ctx.Done():
		return 0, g, ctx.Err()
	}
	return float64(cfg.tasks) / time.Since(start).Seconds(), g, nil
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
	plain, _, err := drain(ctx, emb, cfg, "tenants.plain."+suffix, false, logger)
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
	limited, g, err := drain(ctx, emb, cfg, "tenants.limited."+suffix, true, logger)
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
	return nil
}
