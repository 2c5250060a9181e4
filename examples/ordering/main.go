// Command ordering shows ordered tasks: the events of each order (created,
// paid, shipped) run one at a time and in sequence, while different orders
// run in parallel on a shared pool of three workers, each on its own
// connection.
//
// It enqueues -orders × 3 events, interleaved at random across orders but
// in sequence within each order, with framework.Ordered(orderID). Every
// -fail-every-th order's "paid" event fails once and is retried. Each
// handler checks that no other event of its order is running and that the
// previous event of its order already succeeded; a breach is a violation.
// It prints
//
//	RESULT ordering keys=1000 tasks=3000 violations=0 per_s=… partitions=16 lanes=0 retries=…
//
// (per_s: events completed per second, from the first start to the last
// success) and exits 0 when every event completed without a violation, 1
// otherwise.
//
// Usage:
//
//	go run ./examples/ordering [-orders 1000] [-partitions 16 | -lanes 16] [-fail-every 10] [-work 1ms] [-timeout 2m] [-url nats://127.0.0.1:4222]
//
// With -lanes the ordered type is read in lanes ([framework.Ordering].Lanes):
// the orders run in parallel within each lane, one event of an order at a
// time.
//
// With -url it runs against an existing server instead of an embedded one
// (order IDs then get a suffix of the run, so that runs do not collide), so
// that its partitions can be inspected (jetflow ordering ls) while it runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
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

const (
	taskType = "orders.event"
	workers  = 3
)

// steps are the events of every order, in order.
var steps = []string{"created", "paid", "shipped"}

// Event is the payload of one order event.
type Event struct {
	Order string `json:"order"`
	Step  int    `json:"step"` // index in steps
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "ordering:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	orders     int
	partitions int
	failEvery  int
	lanes      int
	work       time.Duration
	timeout    time.Duration
	url        string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("ordering", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.orders, "orders", 1000, "orders (keys); each has 3 events")
	fs.IntVar(&c.partitions, "partitions", framework.DefaultPartitions, "partitions of the ordered type (a divisor of 256)")
	fs.IntVar(&c.lanes, "lanes", 0, "lanes of the ordered type instead of partitions (a power of two up to 256; 0: partitions)")
	fs.IntVar(&c.failEvery, "fail-every", 10, "the paid event of every n-th order fails once (0: none)")
	fs.DurationVar(&c.work, "work", time.Millisecond, "time each event's handler takes")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "deadline for every event to complete")
	fs.StringVar(&c.url, "url", "", "run against the NATS server at this URL instead of an embedded one")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.orders < 1 || c.failEvery < 0 || c.work < 0 || c.timeout <= 0 {
		return c, fmt.Errorf("want -orders ≥ 1, -fail-every ≥ 0, -work ≥ 0, -timeout > 0")
	}
	if c.partitions < 1 || 256%c.partitions != 0 {
		return c, fmt.Errorf("-partitions %d: want a divisor of 256 (1, 2, 4, … 256)", c.partitions)
	}
	if c.lanes != 0 && (c.lanes < 1 || 256%c.lanes != 0) {
		return c, fmt.Errorf("-lanes %d: want a power of two up to 256", c.lanes)
	}
	return c, nil
}

// ledger checks the events as they run.
type ledger struct {
	mu         sync.Mutex
	running    map[string]bool
	next       map[string]int // next step expected to succeed, per order
	failed     map[string]bool
	violations []string
	done       int
	want       int
	first      time.Time
	last       time.Time
	allDone    chan struct{}
}

func (l *ledger) start(ev Event) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.first.IsZero() {
		l.first = time.Now()
	}
	if l.running[ev.Order] {
		l.violations = append(l.violations, fmt.Sprintf("%s %s started while another event of the order ran", ev.Order, steps[ev.Step]))
	}
	l.running[ev.Order] = true
	if ev.Step > l.next[ev.Order] {
		l.violations = append(l.violations, fmt.Sprintf("%s %s started before %s succeeded", ev.Order, steps[ev.Step], steps[l.next[ev.Order]]))
	}
}

// end records the end of a run; a repeat of a step that already succeeded
// (at-least-once delivery) does not move the order.
func (l *ledger) end(ev Event, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.running[ev.Order] = false
	if !ok || ev.Step < l.next[ev.Order] {
		return
	}
	l.next[ev.Order] = ev.Step + 1
	l.done++
	l.last = time.Now()
	if l.done == l.want {
		close(l.allDone)
	}
}

// failOnce reports whether this run of ev should fail: the first run of the
// paid event of every failEvery-th order.
func (l *ledger) failOnce(ev Event, failEvery, index int) bool {
	if failEvery == 0 || ev.Step != 1 || index%failEvery != 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed[ev.Order] {
		return false
	}
	l.failed[ev.Order] = true
	return true
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	emb, err := testutil.Setup(ctx, cfg.url, streams.Config{}, nats.Name("ordering-client"))
	if err != nil {
		return err
	}
	defer emb.Close()
	suffix := ""
	if url := emb.URL(); url != "" {
		// On a shared server a run suffix keeps this run's keys apart from
		// earlier runs'.
		suffix = fmt.Sprintf("-%x", time.Now().UnixNano()&0xffffff)
		fmt.Fprintf(stdout, "inspect it while it runs: go run ./cmd/jetflow -s %s ordering ls   (or: status --watch)\n", url)
	}

	l := &ledger{running: map[string]bool{}, next: map[string]int{}, failed: map[string]bool{},
		want: cfg.orders * len(steps), allDone: make(chan struct{})}
	var retries atomic.Int64
	orderIndex := make(map[string]int, cfg.orders)
	orderID := func(i int) string { return fmt.Sprintf("ord%s-%05d", suffix, i) }
	for i := range cfg.orders {
		orderIndex[orderID(i)] = i
	}

	// Enqueue first, interleaved: pick a random order with events left and
	// enqueue its next event.
	client, err := framework.NewClient(emb.Conn)
	if err != nil {
		return err
	}
	rng := rand.New(rand.NewPCG(1, 2))
	left := make([]int, cfg.orders) // next step to enqueue per order
	open := make([]int, cfg.orders)
	for i := range open {
		open[i] = i
	}
	specs := make([]framework.TaskSpec, 0, cfg.orders*len(steps))
	for len(open) > 0 {
		j := rng.IntN(len(open))
		i := open[j]
		id := orderID(i)
		specs = append(specs, framework.TaskSpec{Type: taskType, Payload: Event{Order: id, Step: left[i]},
			Options: []framework.EnqueueOption{framework.Ordered(id)}})
		left[i]++
		if left[i] == len(steps) {
			open[j] = open[len(open)-1]
			open = open[:len(open)-1]
		}
	}
	// One connection, asynchronous publishes: the stream stores them in
	// this order.
	if _, err := client.EnqueueMany(ctx, specs); err != nil {
		return err
	}
	ordering := framework.Ordering{Partitions: cfg.partitions}
	layout := fmt.Sprintf("%d partitions", cfg.partitions)
	if cfg.lanes > 0 {
		ordering = framework.Ordering{Lanes: cfg.lanes}
		layout = fmt.Sprintf("%d lanes", cfg.lanes)
	}
	fmt.Fprintf(stdout, "enqueued %d events of %d orders, interleaved; %d workers, %s\n",
		len(specs), cfg.orders, workers, layout)

	for i := range workers {
		name := fmt.Sprintf("worker-%d", i+1)
		wnc, err := emb.Connect(nats.Name(name))
		if err != nil {
			return err
		}
		defer wnc.Close()
		w, err := framework.NewWorker(wnc, framework.WithConcurrency(32), framework.WithLogger(logger.With("worker", name)))
		if err != nil {
			return err
		}
		framework.Handle(w, taskType, func(ctx context.Context, t *framework.Task, ev Event) error {
			if ev.Step < 0 || ev.Step >= len(steps) {
				return framework.Permanent(fmt.Errorf("step %d", ev.Step))
			}
			l.start(ev)
			if l.failOnce(ev, cfg.failEvery, orderIndex[ev.Order]) {
				l.end(ev, false)
				retries.Add(1)
				return framework.RetryAfterErr(50*time.Millisecond, errors.New("payment provider timed out"))
			}
			if cfg.work > 0 {
				time.Sleep(cfg.work)
			}
			l.end(ev, true)
			return nil
		}, framework.WithOrdering(ordering))
		if err := w.Start(ctx); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = w.Shutdown(sctx)
		}()
	}

	timer := time.NewTimer(cfg.timeout)
	defer timer.Stop()
	select {
	case <-l.allDone:
	case <-timer.C:
	case <-ctx.Done():
		return ctx.Err()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	perSec := 0.0
	if d := l.last.Sub(l.first); d > 0 {
		perSec = float64(l.done) / d.Seconds()
	}
	for _, v := range l.violations[:min(len(l.violations), 10)] {
		fmt.Fprintln(stdout, "violation:", v)
	}
	fmt.Fprintf(stdout, "RESULT ordering keys=%d tasks=%d violations=%d per_s=%.0f partitions=%d lanes=%d retries=%d\n",
		cfg.orders, l.done, len(l.violations), perSec, ordering.Partitions, ordering.Lanes, retries.Load())
	switch {
	case l.done != l.want:
		return fmt.Errorf("timed out after %v: %d of %d events completed", cfg.timeout, l.done, l.want)
	case len(l.violations) > 0:
		return fmt.Errorf("%d ordering violations", len(l.violations))
	}
	return nil
}
