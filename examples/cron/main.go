// Command cron shows a repeating schedule that fires once per tick, however
// many replicas of an application register it.
//
// It starts an embedded nats-server and two "replicas" of an application,
// each with its own connection, client and worker. Both register the same
// schedule ("@every 1s", task type coupons.issue) at start-up, as every
// replica of a real deployment would: the second registration finds the
// schedule already stored and changes nothing. The server fires the
// schedule once per second; whichever replica pulls the task runs it. After
// -fires ticks the program removes the schedule, prints a summary and exits
// 0, or 1 when a tick ran twice or the ticks did not come within -timeout.
//
// Each task carries its tick's idempotency key, the same for every delivery
// of the tick: "cron-<schedule>-<YYYYMMDDThhmmssZ>".
//
// Usage:
//
//	go run ./examples/cron [-fires 3] [-timeout 15s] [-url nats://127.0.0.1:4222]
//
// With -url it runs against an existing server instead of an embedded one
// and prints the jetflow CLI commands that show the schedule while it runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "cron:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	fires   int
	timeout time.Duration
	url     string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("cron", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.fires, "fires", 3, "ticks to wait for before exiting")
	fs.DurationVar(&c.timeout, "timeout", 15*time.Second, "deadline for the ticks")
	fs.StringVar(&c.url, "url", "", "run against the NATS server at this URL instead of an embedded one")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.fires < 1 || c.timeout <= 0 {
		return c, errors.New("want -fires ≥ 1 and -timeout > 0")
	}
	return c, nil
}

// Coupon is the payload of every tick.
type Coupon struct {
	Campaign string `json:"campaign"`
	Percent  int    `json:"percent"`
}

// tick is one run of the scheduled task.
type tick struct {
	key     string
	fire    framework.ScheduleFire
	replica string
	late    time.Duration
}

// coupons is the schedule every replica registers at start-up.
var coupons = schedule.Definition{
	Name:    "coupons",
	Spec:    "@every 1s",
	Type:    "coupons.issue",
	Payload: Coupon{Campaign: "spring", Percent: 10},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()

	emb, err := testutil.Setup(ctx, cfg.url, streams.Config{})
	if err != nil {
		return err
	}
	defer emb.Close()

	// Handlers report their runs on ticks, so that only this goroutine
	// writes to stdout.
	ticks := make(chan tick, 64)
	var workers []*framework.Worker
	var conns []*nats.Conn
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		for _, w := range workers {
			_ = w.Shutdown(sctx)
		}
		for _, nc := range conns {
			nc.Close()
		}
	}()
	var client *framework.Client
	for _, replica := range []string{"replica-a", "replica-b"} {
		nc, err := emb.Connect(nats.Name(replica))
		if err != nil {
			return err
		}
		conns = append(conns, nc)
		cl, err := framework.NewClient(nc)
		if err != nil {
			return err
		}
		client = cl
		w, err := framework.NewWorker(nc, framework.WithConcurrency(4))
		if err != nil {
			return err
		}
		framework.Handle(w, "coupons.issue", func(ctx context.Context, t *framework.Task, c Coupon) error {
			fire, _ := t.ScheduleFire()
			ticks <- tick{key: framework.IdempotencyKey(ctx), fire: fire, replica: replica, late: t.EnqueuedAt.Sub(fire.Time)}
			return nil
		})
		if err := w.Start(ctx); err != nil {
			return err
		}
		workers = append(workers, w)
		// Every replica registers the schedule at start-up.
		res, err := schedule.New(cl).Register(ctx, coupons)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s registered schedule %q (%s): %s\n", replica, coupons.Name, coupons.Spec, res)
	}

	info, err := schedule.New(client).Get(ctx, coupons.Name)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schedule %s on %s fires %s into %s; next tick at %s\n",
		info.Name, info.Subject, info.Spec, info.Target, info.Next.UTC().Format("15:04:05"))
	if url := emb.URL(); url != "" {
		fmt.Fprintf(stdout, "inspect it while it runs: go run ./cmd/jetflow -s %s cron ls   (or: status, tasks ls --state running)\n", url)
	}

	seen := map[string]int{}
	var runs []tick
	for len(seen) < cfg.fires {
		select {
		case t := <-ticks:
			seen[t.key]++
			runs = append(runs, t)
			fmt.Fprintf(stdout, "tick %s  ran on %s  key %s  (stored %v after the tick)\n",
				t.fire.Time.Format("15:04:05"), t.replica, t.key, t.late.Round(time.Millisecond))
		case <-ctx.Done():
			return fmt.Errorf("timed out after %v with %d of %d ticks", cfg.timeout, len(seen), cfg.fires)
		}
	}
	if err := schedule.New(client).Remove(ctx, coupons.Name); err != nil {
		return err
	}

	byReplica := map[string]int{}
	var dups []string
	for _, r := range runs {
		byReplica[r.replica]++
	}
	for k, n := range seen {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%s ran %d times", k, n))
		}
	}
	sort.Strings(dups)
	fmt.Fprintf(stdout, "summary: %d ticks, %d runs (replica-a %d, replica-b %d), %d duplicates; schedule removed\n",
		len(seen), len(runs), byReplica["replica-a"], byReplica["replica-b"], len(dups))
	if len(dups) > 0 {
		return fmt.Errorf("ticks ran more than once: %s", strings.Join(dups, "; "))
	}
	return nil
}
