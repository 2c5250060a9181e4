// Command rollout runs a rolling deploy under load: the payload of a task
// type gains a field (version 2), the producers switch to it, and three
// workers of the old build (version 1) are replaced one at a time by
// workers of the new build, while tasks keep arriving at -rate per second.
//
// The old build's handler takes version 1 only (its payload type says so:
// framework.VersionedArgs), so a version 2 task that reaches an old worker
// is handed back without spending an attempt and runs on a new worker. The
// timeline, with P the -phase:
//
//	0      three v1 workers; the producers enqueue v1 tasks
//	P      worker 1 replaced by a v2 worker (the old one shuts down gracefully)
//	1.5P   the producers switch to v2 payloads: two of three workers are still v1
//	2P     worker 2 replaced
//	3P     worker 3 replaced
//	4P     the producers stop; every task must run once
//
// It ends by printing
//
//	RESULT rollout tasks=N lost=0 dead=0 wasted_attempts=0 max_wait_ms=M handed_back=H shutdown_handbacks=S
//
// where wasted_attempts counts the attempts a version mismatch cost (a
// handler that could not decode its payload, or a redelivery instead of a
// hand-back), handed_back the tasks handed back for their version, and
// shutdown_handbacks the tasks the replaced workers handed back when they
// shut down (prefetched, not started; that redelivery is the graceful
// shutdown's, not the version's). It exits 1 when a task was lost, dead or
// cost an attempt. With -no-versions the old build declares no versions, as
// before payload versions existed: its strict decoder fails the v2 tasks it
// receives, and they are dead-lettered (exit 0, the RESULT line shows it).
//
// Usage:
//
//	go run ./examples/rollout [-rate 2000] [-phase 3s] [-no-versions] [-v] [-timeout 60s] [-url nats://127.0.0.1:4222]
//
// With -url it runs against an existing server and prints the jetflow CLI
// command that lists the workers with the payload versions they accept.
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

const taskType = "rollout.charge"

// ChargeV1 is the old build's payload.
type ChargeV1 struct {
	Run    string `json:"run"`
	Seq    int    `json:"seq"`
	Sent   int64  `json:"sent"` // Unix nanoseconds
	Amount int    `json:"amount"`
}

// TaskType binds the payload to its task type.
func (ChargeV1) TaskType() string { return taskType }

// PayloadVersion is the version the old build writes and reads.
func (ChargeV1) PayloadVersion() int { return 1 }

// ChargeV2 is the new build's payload: it gained a currency. The new
// build reads version 1 payloads too (the currency is then the default).
type ChargeV2 struct {
	Run      string `json:"run"`
	Seq      int    `json:"seq"`
	Sent     int64  `json:"sent"`
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

// TaskType binds the payload to its task type.
func (ChargeV2) TaskType() string { return taskType }

// PayloadVersion is the version the new build writes; it reads 1 and 2.
func (ChargeV2) PayloadVersion() int { return 2 }

// legacyV1 is ChargeV1 as a build without payload versions declares it
// (-no-versions).
type legacyV1 struct {
	Run    string `json:"run"`
	Seq    int    `json:"seq"`
	Sent   int64  `json:"sent"`
	Amount int    `json:"amount"`
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "rollout:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	rate       int
	phase      time.Duration
	noVersions bool
	verbose    bool
	timeout    time.Duration
	url        string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("rollout", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.rate, "rate", 2000, "tasks enqueued per second")
	fs.DurationVar(&c.phase, "phase", 3*time.Second, "time between two steps of the deploy")
	fs.BoolVar(&c.noVersions, "no-versions", false, "the old build declares no payload versions (as before they existed)")
	fs.BoolVar(&c.verbose, "v", false, "log the workers at Info")
	fs.DurationVar(&c.timeout, "timeout", 60*time.Second, "deadline for every task to run after the producers stop")
	fs.StringVar(&c.url, "url", "", "use the existing NATS server at this URL instead of starting one")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.rate < 1 || c.phase < 100*time.Millisecond {
		return c, fmt.Errorf("-rate %d and -phase %v: want at least 1 and 100ms", c.rate, c.phase)
	}
	return c, nil
}

// ledger records every run of this run's tasks.
type ledger struct {
	run      string
	mu       sync.Mutex
	done     map[int]bool
	dups     int
	maxWait  time.Duration
	wasted   atomic.Int64 // attempts a version mismatch cost
	dead     atomic.Int64
	progress chan struct{} // a task ran
}

func (l *ledger) ran(run string, seq int, sent int64, attempt int) {
	if run != l.run {
		return // an earlier run's task on a shared server
	}
	wait := time.Since(time.Unix(0, sent))
	l.mu.Lock()
	if l.done[seq] {
		l.dups++
	}
	l.done[seq] = true
	l.maxWait = max(l.maxWait, wait)
	l.mu.Unlock()
	l.tick()
}

// tick wakes the wait for the last tasks.
func (l *ledger) tick() {
	select {
	case l.progress <- struct{}{}:
	default:
	}
}

func (l *ledger) count() (done, dups int, maxWait time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.done), l.dups, l.maxWait
}

// fleet starts and replaces the workers.
type fleet struct {
	emb    *testutil.Embedded
	l      *ledger
	cfg    config
	logger *slog.Logger

	mu       sync.Mutex
	stats    []framework.Stats // of the workers that stopped
	handBack atomic.Int64      // shutdown hand-backs of the replaced workers
}

// start starts worker name of build version (1 or 2).
func (f *fleet) start(ctx context.Context, name string, version int) (*framework.Worker, *nats.Conn, error) {
	nc, err := f.emb.Connect(nats.Name(name))
	if err != nil {
		return nil, nil, err
	}
	w, err := framework.NewWorker(nc, framework.WithConcurrency(16), framework.WithWorkerID(name),
		framework.WithVersion(fmt.Sprintf("rollout-build-v%d", version)),
		framework.WithLogger(f.logger.With("worker", name)),
		framework.WithHooks(framework.Hooks{Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
			if o.Action == framework.ActionFail {
				f.l.dead.Add(1)
				if errors.Is(o.Err, framework.ErrDecode) {
					f.l.wasted.Add(1)
				}
				f.l.tick()
			}
		}}))
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	switch {
	case version == 2:
		framework.HandleArgs(w, func(_ context.Context, t *framework.Task, c ChargeV2) error {
			if c.Currency == "" && t.PayloadVersion() == 1 {
				c.Currency = "EUR" // version 1 payloads were all in euros
			}
			if c.Currency == "" {
				return framework.Permanent(fmt.Errorf("charge %d: version %d payload without a currency", c.Seq, t.PayloadVersion()))
			}
			f.l.ran(c.Run, c.Seq, c.Sent, t.Attempt)
			return nil
		}, framework.StrictPayload())
	case f.cfg.noVersions:
		framework.Handle(w, taskType, func(_ context.Context, t *framework.Task, c legacyV1) error {
			f.l.ran(c.Run, c.Seq, c.Sent, t.Attempt)
			return nil
		}, framework.StrictPayload())
	default:
		framework.HandleArgs(w, func(_ context.Context, t *framework.Task, c ChargeV1) error {
			f.l.ran(c.Run, c.Seq, c.Sent, t.Attempt)
			return nil
		}, framework.StrictPayload())
	}
	if err := w.Start(ctx); err != nil {
		nc.Close()
		return nil, nil, err
	}
	return w, nc, nil
}

// stop shuts w down gracefully and keeps its counters.
func (f *fleet) stop(w *framework.Worker, nc *nats.Conn) error {
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := w.Shutdown(sctx)
	nc.Close()
	st := w.Stats()
	f.mu.Lock()
	f.stats = append(f.stats, st)
	f.mu.Unlock()
	f.handBack.Add(int64(st.HandedBack))
	return err
}

func (f *fleet) totals() (handedBack, redelivered uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.stats {
		handedBack += s.VersionsHandedBack
		redelivered += s.VersionsRedelivered
	}
	return handedBack, redelivered
}

// producer enqueues cfg.rate tasks per second in batches of 10 ms until
// ctx ends, in the version v2 says.
type producer struct {
	client *framework.Client
	run    string
	v2     atomic.Bool
	sent   atomic.Int64
	err    atomic.Pointer[error]
}

func (p *producer) loop(ctx context.Context, rate int) {
	const tick = 10 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	start := time.Now()
	seq := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		due := int(time.Since(start).Seconds() * float64(rate))
		specs := make([]framework.TaskSpec, 0, due-seq)
		now := time.Now().UnixNano()
		for ; seq < due; seq++ {
			if p.v2.Load() {
				specs = append(specs, framework.Spec(ChargeV2{Run: p.run, Seq: seq, Sent: now, Amount: 100 + seq%900, Currency: "USD"}))
			} else {
				specs = append(specs, framework.Spec(ChargeV1{Run: p.run, Seq: seq, Sent: now, Amount: 100 + seq%900}))
			}
		}
		if len(specs) == 0 {
			continue
		}
		if _, err := p.client.EnqueueMany(context.WithoutCancel(ctx), specs); err != nil {
			p.err.Store(&err)
			return
		}
		p.sent.Add(int64(len(specs)))
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelError
	if cfg.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	emb, err := testutil.Setup(ctx, cfg.url, streams.Config{}, nats.Name("rollout-producer"))
	if err != nil {
		return err
	}
	defer emb.Close()
	runID := fmt.Sprintf("%x", time.Now().UnixNano())
	if url := emb.URL(); url != "" {
		fmt.Fprintf(stdout, "inspect it while it runs: go run ./cmd/jetflow -s %s workers --type %s\n", url, taskType)
	}
	l := &ledger{run: runID, done: make(map[int]bool), progress: make(chan struct{}, 1)}
	f := &fleet{emb: emb, l: l, cfg: cfg, logger: logger}

	type live struct {
		w  *framework.Worker
		nc *nats.Conn
	}
	workers := make([]live, 3)
	defer func() {
		for _, lw := range workers {
			if lw.w != nil {
				_ = f.stop(lw.w, lw.nc)
			}
		}
	}()
	for i := range workers {
		w, nc, err := f.start(ctx, fmt.Sprintf("old-%d", i+1), 1)
		if err != nil {
			return err
		}
		workers[i] = live{w, nc}
	}
	client, err := framework.NewClient(emb.Conn)
	if err != nil {
		return err
	}
	p := &producer{client: client, run: runID}
	pctx, stopProducing := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() { defer pwg.Done(); p.loop(pctx, cfg.rate) }()
	fmt.Fprintf(stdout, "3 workers of build v1; enqueueing %d v1 tasks/s\n", cfg.rate)

	wait := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	replace := func(i int) error {
		old := workers[i]
		workers[i] = live{}
		if err := f.stop(old.w, old.nc); err != nil {
			return fmt.Errorf("stop old-%d: %w", i+1, err)
		}
		w, nc, err := f.start(ctx, fmt.Sprintf("new-%d", i+1), 2)
		if err != nil {
			return err
		}
		workers[i] = live{w, nc}
		fmt.Fprintf(stdout, "worker %d replaced: build v2 (accepts payload v1 and v2)\n", i+1)
		return nil
	}
	steps := []func() error{
		func() error { return wait(cfg.phase) },
		func() error { return replace(0) },
		func() error { return wait(cfg.phase / 2) },
		func() error {
			p.v2.Store(true)
			fmt.Fprintln(stdout, "producers switched to payload v2 (two of three workers still v1)")
			return nil
		},
		func() error { return wait(cfg.phase / 2) },
		func() error { return replace(1) },
		func() error { return wait(cfg.phase) },
		func() error { return replace(2) },
		func() error { return wait(cfg.phase) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			stopProducing()
			pwg.Wait()
			return err
		}
	}
	stopProducing()
	pwg.Wait()
	if perr := p.err.Load(); perr != nil {
		return fmt.Errorf("enqueue: %w", *perr)
	}
	sent := int(p.sent.Load())
	fmt.Fprintf(stdout, "producers stopped after %d tasks; waiting for the rest to run\n", sent)
	timeout := time.After(cfg.timeout)
waiting:
	for {
		done, _, _ := l.count()
		if done+int(l.dead.Load()) >= sent {
			break
		}
		select {
		case <-l.progress:
		case <-timeout:
			break waiting
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for i, lw := range workers {
		_ = f.stop(lw.w, lw.nc)
		workers[i] = live{}
	}
	done, dups, maxWait := l.count()
	dead := int(l.dead.Load())
	handedBack, redelivered := f.totals()
	wasted := l.wasted.Load() + int64(redelivered)
	lost := max(0, sent-done-dead)
	fmt.Fprintf(stdout, "RESULT rollout tasks=%d lost=%d dead=%d wasted_attempts=%d max_wait_ms=%d handed_back=%d shutdown_handbacks=%d duplicates=%d rate=%d\n",
		sent, lost, dead, wasted, maxWait.Milliseconds(), handedBack, f.handBack.Load(), dups, cfg.rate)
	if cfg.noVersions {
		return nil
	}
	if lost > 0 || dead > 0 || wasted > 0 {
		return fmt.Errorf("%d tasks lost, %d dead, %d attempts wasted", lost, dead, wasted)
	}
	return nil
}
