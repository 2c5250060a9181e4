// Command ratelimit shows a cluster-wide rate limit: three workers, each on
// its own connection, call one dependency (a fake payment gateway, an HTTP
// server on 127.0.0.1) that allows -limit calls per second for the whole
// platform.
//
// Every worker declares the same limit with ratelimit.Install and
// ratelimit.WithDependency and calls the gateway with
// handlers.DoHTTP, which waits for a permit of the shared limit. The
// gateway counts the calls it receives in 1-second windows (starting at its
// first call) and the program prints
//
//	RESULT ratelimit limit_per_s=100 observed_per_s=… workers=3 over_limit_windows=… calls=… windows=…
//
// observed_per_s is calls/(last − first call) as the gateway saw them;
// over_limit_windows counts the full 1-second windows with more than -limit
// calls. It exits 0 once every task completed, 1 otherwise.
//
// Usage:
//
//	go run ./examples/ratelimit [-tasks 1000] [-limit 100] [-burst 1] [-timeout 60s] [-url nats://127.0.0.1:4222]
//
// With -url it runs against an existing server instead of an embedded one,
// so that its limit can be inspected (jetflow limits) while it runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/handlers"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

const (
	dependency = "payments-gw"
	taskType   = "payments.charge"
	workers    = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "ratelimit:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	tasks   int
	limit   int
	burst   int
	timeout time.Duration
	url     string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("ratelimit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.tasks, "tasks", 1000, "charges to queue")
	fs.IntVar(&c.limit, "limit", 100, "calls per second the gateway allows, for all workers together")
	fs.IntVar(&c.burst, "burst", 1, "calls allowed at once after an idle period")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "deadline for every charge to complete")
	fs.StringVar(&c.url, "url", "", "run against the NATS server at this URL instead of an embedded one")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.tasks < 1 || c.limit < 1 || c.burst < 1 || c.burst > c.limit || c.timeout <= 0 {
		return c, fmt.Errorf("want -tasks ≥ 1, -limit ≥ 1, 1 ≤ -burst ≤ -limit, -timeout > 0")
	}
	return c, nil
}

// gateway records when each call arrived.
type gateway struct {
	*httptest.Server
	mu    sync.Mutex
	calls []time.Time
}

func newGateway() *gateway {
	g := &gateway{}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.calls = append(g.calls, time.Now())
		g.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	return g
}

// stats returns the observed rate and the 1-second windows above limit.
func (g *gateway) stats(limit int) (calls int, perSec float64, windows, over int, counts []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	calls = len(g.calls)
	if calls < 2 {
		return calls, 0, 0, 0, nil
	}
	first, last := g.calls[0], g.calls[0]
	for _, c := range g.calls {
		if c.Before(first) {
			first = c
		}
		if c.After(last) {
			last = c
		}
	}
	perSec = float64(calls-1) / last.Sub(first).Seconds()
	windows = int(last.Sub(first) / time.Second) // full windows only
	counts = make([]int, windows+1)
	for _, c := range g.calls {
		counts[int(c.Sub(first)/time.Second)]++
	}
	for _, n := range counts[:windows] {
		if n > limit {
			over++
		}
	}
	return calls, perSec, windows, over, counts[:windows]
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	emb, err := testutil.Setup(ctx, cfg.url, streams.Config{}, nats.Name("ratelimit-client"))
	if err != nil {
		return err
	}
	defer emb.Close()
	if url := emb.URL(); url != "" {
		fmt.Fprintf(stdout, "inspect it while it runs: go run ./cmd/jetflow -s %s limits   (or: status --watch)\n", url)
	}
	gw := newGateway()
	defer gw.Close()
	httpClient := &http.Client{Timeout: 5 * time.Second}
	defer httpClient.CloseIdleConnections()

	var done atomic.Int64
	allDone := make(chan struct{})
	limit := ratelimit.Limit{Limit: cfg.limit, Interval: time.Second, Burst: cfg.burst}
	for i := range workers {
		name := fmt.Sprintf("worker-%d", i+1)
		wnc, err := emb.Connect(nats.Name(name))
		if err != nil {
			return err
		}
		defer wnc.Close()
		w, err := framework.NewWorker(wnc,
			framework.WithConcurrency(16),
			framework.WithLogger(logger.With("worker", name)),
			framework.WithHooks(framework.Hooks{
				Finished: func(_ context.Context, _ *framework.Task, o framework.Outcome) {
					if o.Action == framework.ActionAck && done.Add(1) == int64(cfg.tasks) {
						close(allDone)
					}
				},
			}),
		)
		if err != nil {
			return err
		}
		if err := ratelimit.Install(w, ratelimit.WithDependency(dependency, limit)); err != nil {
			return err
		}
		// DoHTTP calls through the worker's circuit breakers.
		if _, err := breaker.Install(w); err != nil {
			return err
		}
		w.HandleFunc(taskType, func(ctx context.Context, _ *framework.Task) error {
			req, err := http.NewRequest(http.MethodPost, gw.URL+"/charges", nil)
			if err != nil {
				return framework.Permanent(err)
			}
			resp, err := handlers.DoHTTP(ctx, httpClient, dependency, req)
			if err != nil {
				return err
			}
			return resp.Body.Close()
		})
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Shutdown(sctx)
		}()
	}

	client, err := framework.NewClient(emb.Conn)
	if err != nil {
		return err
	}
	jobs := make([]framework.TaskSpec, cfg.tasks)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: taskType, Payload: map[string]int{"order": i}}
	}
	if _, err := client.EnqueueMany(ctx, jobs); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "queued %d charges; %d workers share a limit of %d calls/s (burst %d)\n", cfg.tasks, workers, cfg.limit, cfg.burst)

	timer := time.NewTimer(cfg.timeout)
	defer timer.Stop()
	select {
	case <-allDone:
	case <-timer.C:
		return fmt.Errorf("timed out after %v: %d of %d charges completed", cfg.timeout, done.Load(), cfg.tasks)
	case <-ctx.Done():
		return ctx.Err()
	}
	if infos, err := inspect.New(client).RateLimits(ctx); err == nil {
		for _, in := range infos {
			fmt.Fprintf(stdout, "limit %s: %d per %v, burst %d; %d permits in the last full second\n",
				in.Name, in.Limit.Limit, in.Limit.Interval, in.Limit.Burst, in.LastSecond)
		}
	}
	calls, perSec, windows, over, counts := gw.stats(cfg.limit)
	fmt.Fprintf(stdout, "calls per full 1-second window: %v\n", counts)
	fmt.Fprintf(stdout, "RESULT ratelimit limit_per_s=%d observed_per_s=%.1f workers=%d over_limit_windows=%d calls=%d windows=%d\n",
		cfg.limit, perSec, workers, over, calls, windows)
	if calls != cfg.tasks {
		return fmt.Errorf("the gateway saw %d calls for %d charges", calls, cfg.tasks)
	}
	return nil
}
