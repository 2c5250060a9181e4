// Command approval runs orders that wait for a human's approval: each
// order reserves its stock (undone by a compensation), waits for the event
// "approval/<order>" with a timeout, sleeps until the order's due time,
// then ships its items. An order whose approval does not come in time fails
// with workflow.ErrEventTimeout, and its reservation is released.
//
// The workflow:
//
//	reserve  (compensation: release)
//	approval workflow.WaitEvent, key "approval/<order>", workflow.Timeout(-timeout)
//	due      workflow.SleepUntil the order's due time (-due after its start)
//	items    the order's items
//	ship     workflow.ForEach over the items: each item shipped on a task of its own
//	confirm  the approval and every item's shipment, in item order
//
// Waiting and sleeping hold nothing in the worker: the wait and the sleep
// are recorded in the run's document and in the server, and the worker lets
// go of their tasks. The items ship in parallel, one task per item, and
// confirm reads their results with workflow.Results.
//
// The program approves all orders but the last -unapproved ones itself,
// -approve-after after starting them (none with -no-approve), as a person
// would with the jetflow CLI, whose command it prints. It ends by printing
//
//	RESULT approval orders=N approved=A timed_out_compensated=T
//
// and exits 1 when an order ended neither shipped nor released, or an
// order the program approved did not ship.
//
// Usage:
//
//	go run ./examples/approval [-orders 3] [-unapproved 1] [-approve-after 1s] [-timeout 3s] [-due 2s] [-no-approve] [-url nats://127.0.0.1:4222]
//
// With -url it runs against an existing server, where an order can be
// approved by hand while it waits:
//
//	go run ./cmd/jetflow -s nats://127.0.0.1:4222 workflows signal approval/<order> '{"by":"alice"}'
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
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

// Order is the input of a run.
type Order struct {
	ID    string    `json:"id"`
	Items []string  `json:"items"`
	Due   time.Time `json:"due"`
}

// Approval is the payload of the approval event.
type Approval struct {
	By string `json:"by"`
}

// approvalKey is the event key an order waits for.
func approvalKey(order string) string { return "approval/" + order }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "approval:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	orders       int
	unapproved   int
	approveAfter time.Duration
	timeout      time.Duration
	due          time.Duration
	noApprove    bool
	url          string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("approval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.orders, "orders", 3, "orders to run")
	fs.IntVar(&c.unapproved, "unapproved", 1, "orders (the last ones) the program does not approve: they time out and compensate")
	fs.DurationVar(&c.approveAfter, "approve-after", time.Second, "time after the start when the program approves an order")
	fs.DurationVar(&c.timeout, "timeout", 3*time.Second, "how long an order waits for its approval (at least 1s)")
	fs.DurationVar(&c.due, "due", 2*time.Second, "an order's due time, after its start: it ships then at the earliest")
	fs.BoolVar(&c.noApprove, "no-approve", false, "approve no order (approve them by hand with the jetflow CLI, or let them time out)")
	fs.StringVar(&c.url, "url", "", "use the existing NATS server at this URL instead of starting one")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	switch {
	case c.orders < 1 || c.unapproved < 0 || c.unapproved > c.orders:
		return c, fmt.Errorf("-orders %d and -unapproved %d: want at least one order and at most that many unapproved", c.orders, c.unapproved)
	case c.timeout < time.Second:
		return c, fmt.Errorf("-timeout %v: want at least 1s", c.timeout)
	case c.approveAfter < 0 || c.approveAfter >= c.timeout:
		return c, fmt.Errorf("-approve-after %v: want 0 up to -timeout %v", c.approveAfter, c.timeout)
	case c.due < 0:
		return c, fmt.Errorf("-due %v: want 0 or more", c.due)
	}
	return c, nil
}

// stock records the reservations, releases and shipments of this process.
type stock struct {
	mu       sync.Mutex
	reserved map[string]int
	released map[string]int
	shipped  map[string][]string
}

// newDefinition returns the order workflow, whose steps record what they
// do in s.
func newDefinition(s *stock, timeout time.Duration) *workflow.Definition {
	def := workflow.New("order")
	workflow.Step(def, "reserve", func(_ context.Context, o Order) (int, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.reserved[o.ID] = len(o.Items)
		return len(o.Items), nil
	}, workflow.Compensate(func(_ context.Context, o Order, n int) error {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.released[o.ID] = n
		return nil
	}))
	workflow.WaitEvent(def, "approval", func(_ context.Context, o Order) (string, error) {
		return approvalKey(o.ID), nil
	}, workflow.After("reserve"), workflow.Timeout(timeout)) // TimeoutFail: the run fails and compensates
	workflow.SleepUntil(def, "due", func(_ context.Context, o Order) (time.Time, error) {
		return o.Due, nil
	}, workflow.After("approval"))
	workflow.Step(def, "items", func(_ context.Context, o Order) ([]string, error) {
		return o.Items, nil
	}, workflow.After("due"))
	workflow.ForEach(def, "ship", "items", func(ctx context.Context, item string) (string, error) {
		info, _ := workflow.Info(ctx) // the run ID is the order's ID
		s.mu.Lock()
		defer s.mu.Unlock()
		if !slices.Contains(s.shipped[info.RunID], item) { // an item task runs at least once
			s.shipped[info.RunID] = append(s.shipped[info.RunID], item)
		}
		return "shipped " + item, nil
	})
	workflow.Step(def, "confirm", func(ctx context.Context, o Order) ([]string, error) {
		a, err := workflow.Output[Approval](ctx, "approval")
		if err != nil {
			return nil, err
		}
		shipped, err := workflow.Results[string](ctx, "ship")
		if err != nil {
			return nil, err
		}
		return append([]string{"approved by " + a.By}, shipped...), nil
	}, workflow.After("ship"))
	return def
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	emb, err := testutil.Setup(ctx, cfg.url, streams.Config{})
	if err != nil {
		return err
	}
	defer emb.Close()

	s := &stock{reserved: map[string]int{}, released: map[string]int{}, shipped: map[string][]string{}}
	def := newDefinition(s, cfg.timeout)
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := framework.NewWorker(emb.Conn, framework.WithLogger(logger))
	if err != nil {
		return err
	}
	workflow.Register(w, def)
	if err := w.Start(ctx); err != nil { // creates the event streams where missing
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(sctx)
	}()
	fc, err := framework.NewClient(emb.Conn)
	if err != nil {
		return err
	}
	wf, err := workflow.NewClient(fc, def)
	if err != nil {
		return err
	}

	// Order IDs of this process: a second run against the same server
	// waits for events of its own.
	tag := nuid.Next()[16:]
	ids := make([]string, cfg.orders)
	start := time.Now()
	for i := range ids {
		o := Order{
			ID:    "ord-" + tag + "-" + strconv.Itoa(i+1),
			Items: []string{"book", "lamp", "mug"}[:1+i%3],
			Due:   start.Add(cfg.due),
		}
		if ids[i], err = wf.Start(ctx, "order", o, workflow.WithRunID(o.ID)); err != nil {
			return fmt.Errorf("start order %s: %w", o.ID, err)
		}
		fmt.Fprintf(stdout, "order %s: %d items, waiting for approval/%s (until %s)\n", o.ID, len(o.Items), o.ID, start.Add(cfg.timeout).Format(time.TimeOnly))
	}
	if url := emb.URL(); url != "" {
		fmt.Fprintf(stdout, "approve one by hand: go run ./cmd/jetflow -s %s workflows signal %s '{\"by\":\"alice\"}'\n", url, approvalKey(ids[0]))
	}

	// A person approves the orders, after a while.
	approve := 0
	if !cfg.noApprove {
		approve = cfg.orders - cfg.unapproved
	}
	t := time.NewTimer(cfg.approveAfter)
	select {
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
		return ctx.Err()
	}
	for _, id := range ids[:approve] {
		if _, err := wf.Signal(ctx, approvalKey(id), Approval{By: "alice"}); err != nil {
			return fmt.Errorf("approve %s: %w", id, err)
		}
		fmt.Fprintf(stdout, "order %s: approved by alice\n", id)
	}

	var approved, compensated, other int
	for _, id := range ids {
		r, err := wf.Wait(ctx, id)
		if err != nil {
			return fmt.Errorf("wait for order %s: %w", id, err)
		}
		s.mu.Lock()
		shipped, released := slices.Clone(s.shipped[id]), s.released[id]
		s.mu.Unlock()
		slices.Sort(shipped) // the items ship in parallel
		switch {
		case r.Status == workflow.RunCompleted && len(shipped) > 0:
			approved++
			fmt.Fprintf(stdout, "order %s: shipped %v (%s)\n", id, shipped, r.Step("confirm").Output)
		case r.Status == workflow.RunFailed && released > 0:
			compensated++
			fmt.Fprintf(stdout, "order %s: %s; %d items released\n", id, r.Error, released)
		default:
			other++
			fmt.Fprintf(stdout, "order %s: ended %s: %s\n", id, r.Status, r.Error)
		}
	}
	fmt.Fprintf(stdout, "RESULT approval orders=%d approved=%d timed_out_compensated=%d\n", cfg.orders, approved, compensated)
	if other > 0 || approved < approve {
		return fmt.Errorf("%d orders ended neither shipped nor released; %d of the %d orders approved by the program shipped", other, approved, approve)
	}
	return nil
}
