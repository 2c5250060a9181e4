// Command peers measures jetflow side by side with asynq (on Redis) and River
// (on PostgreSQL) on the same machine: the drain of a pre-enqueued backlog of
// no-op tasks, and enqueueing one by one (each call waiting for its
// acknowledgement), plus bulk enqueue where the library has one.
//
// It is its own module so that jetflow's module never depends on asynq or
// River. run.sh installs and starts the servers (Debian packages) and runs
// it; see docs/benchmarks.md for the method and the figures.
//
// Usage:
//
//	go run . -nats nats://127.0.0.1:4222 -redis 127.0.0.1:6379 -pg postgres://… [-n 30000] [-runs 3] [-concurrency 32]
//
// Each figure prints one line to stdout:
//
//	RESULT peers_drain system=<jetflow|asynq|river> per_s=… runs=…
//	RESULT peers_enqueue_one system=… per_s=…
//	RESULT peers_enqueue_bulk system=… per_s=…
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"
)

type config struct {
	natsURL, redisAddr, pgDSN string
	n, oneN, runs, conc       int
	only                      map[string]bool
	timeout                   time.Duration
}

// system is one queue under test.
type system interface {
	name() string
	// drain enqueues n tasks (untimed), then times their drain by a worker
	// with the configured concurrency.
	drain(ctx context.Context, n int) (float64, error)
	// enqueueOne times n sequential enqueues.
	enqueueOne(ctx context.Context, n int) (float64, error)
	// enqueueBulk times enqueueing n tasks with the library's batch API; 0
	// when it has none.
	enqueueBulk(ctx context.Context, n int) (float64, error)
	close()
}

func main() {
	var cfg config
	only := ""
	flag.StringVar(&cfg.natsURL, "nats", "", "NATS server with JetStream for jetflow (empty: skip jetflow)")
	flag.StringVar(&cfg.redisAddr, "redis", "", "Redis address for asynq (empty: skip asynq)")
	flag.StringVar(&cfg.pgDSN, "pg", "", "PostgreSQL DSN for River (empty: skip River)")
	flag.IntVar(&cfg.n, "n", 30000, "tasks per drain and bulk enqueue")
	flag.IntVar(&cfg.oneN, "one-n", 5000, "tasks of the one-by-one enqueue")
	flag.IntVar(&cfg.runs, "runs", 3, "runs of each figure; the median is printed")
	flag.IntVar(&cfg.conc, "concurrency", 32, "worker concurrency of every system")
	flag.StringVar(&only, "only", "", "comma-separated systems: jetflow,asynq,river (default: those with a server)")
	flag.DurationVar(&cfg.timeout, "timeout", 5*time.Minute, "bound on each drain")
	flag.Parse()
	cfg.only = map[string]bool{}
	for _, s := range strings.Split(only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			cfg.only[s] = true
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "peers:", err)
		os.Exit(1)
	}
}

func (c config) wants(name, addr string) bool {
	return addr != "" && (len(c.only) == 0 || c.only[name])
}

func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	var systems []system
	defer func() {
		for _, s := range systems {
			s.close()
		}
	}()
	if cfg.wants("jetflow", cfg.natsURL) {
		s, err := newJetflow(ctx, cfg)
		if err != nil {
			return err
		}
		systems = append(systems, s)
	}
	if cfg.wants("asynq", cfg.redisAddr) {
		s, err := newAsynq(ctx, cfg)
		if err != nil {
			return err
		}
		systems = append(systems, s)
	}
	if cfg.wants("river", cfg.pgDSN) {
		s, err := newRiver(ctx, cfg)
		if err != nil {
			return err
		}
		systems = append(systems, s)
	}
	if len(systems) == 0 {
		return fmt.Errorf("no system to measure: give -nats, -redis and/or -pg")
	}
	figures := []struct {
		name string
		n    int
		fn   func(system, context.Context, int) (float64, error)
	}{
		{"peers_drain", cfg.n, system.drain},
		{"peers_enqueue_one", cfg.oneN, system.enqueueOne},
		{"peers_enqueue_bulk", cfg.n, system.enqueueBulk},
	}
	// Rounds interleave the systems (jetflow, asynq, river, jetflow, …) so
	// that load drifting on a shared machine hits them alike.
	for _, f := range figures {
		rates := make(map[string][]float64)
		for r := 1; r <= cfg.runs; r++ {
			for _, s := range systems {
				rate, err := f.fn(s, ctx, f.n)
				if err != nil {
					return fmt.Errorf("%s %s run %d: %w", f.name, s.name(), r, err)
				}
				if rate == 0 {
					continue // no such API
				}
				fmt.Fprintf(stderr, "peers: %s run %d/%d %-7s %8.0f tasks/s\n", f.name, r, cfg.runs, s.name(), rate)
				rates[s.name()] = append(rates[s.name()], rate)
			}
		}
		for _, s := range systems {
			if rs := rates[s.name()]; len(rs) > 0 {
				fmt.Fprintf(stdout, "RESULT %s system=%s per_s=%.0f n=%d runs=%d\n", f.name, s.name(), median(rs), f.n, len(rs))
			}
		}
	}
	return nil
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// payload is the same 64-byte JSON document for every system.
var payload = []byte(`{"pad":"` + strings.Repeat("x", 64-len(`{"pad":""}`)) + `"}`)

// waitDone waits for done to close, for at most d.
func waitDone(ctx context.Context, done <-chan struct{}, d time.Duration, what string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		return fmt.Errorf("timed out after %v waiting for %s", d, what)
	case <-ctx.Done():
		return ctx.Err()
	}
}
