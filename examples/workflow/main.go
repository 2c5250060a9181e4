// Command workflow runs an order-fulfilment saga on an embedded NATS server:
// reserve stock → charge the payment (through a circuit breaker) → ship, with
// release and refund compensations when a later step fails.
//
// It starts three orders: one goes through, one meets a payment gateway
// answering 503 once (the charge step is retried), one has an address the
// carrier refuses (the shipment fails for good: the payment is refunded, then
// the stock released, in reverse order). It prints progress and a summary, and
// exits with status 1 when a run ends differently than planned or does not
// end within -timeout.
//
// Usage:
//
//	go run ./examples/workflow [-timeout 15s] [-v] [-url nats://127.0.0.1:4222]
//
// With -url it runs against an existing server instead of an embedded one
// (run IDs then get a suffix of the run, so that runs do not collide) and
// prints the jetflow CLI commands that show the runs and their steps.
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
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "workflow:", err)
		}
		os.Exit(1)
	}
}

// Order is the input of every run.
type Order struct {
	ID      string `json:"id"`
	SKU     string `json:"sku"`
	Qty     int    `json:"qty"`
	Cents   int    `json:"cents"`
	Address string `json:"address"`
}

// Reservation, Payment and Shipment are the outputs of the three steps.
type Reservation struct {
	Key string `json:"key"`
	Qty int    `json:"qty"`
}

type Payment struct {
	ID    string `json:"id"`
	Cents int    `json:"cents"`
}

type Shipment struct {
	Parcel string `json:"parcel"`
}

// shop holds the services the steps call and prints progress.
type shop struct {
	inv     *inventory
	gw      *gateway
	carrier carrier

	mu  sync.Mutex
	out io.Writer
}

// say prints a progress line of the step of ctx.
func (s *shop) say(ctx context.Context, format string, args ...any) {
	info, _ := workflow.Info(ctx)
	s.printf("  %-8s %-9s %s\n", info.RunID, info.Step+pick(info.Compensation, "↺", ""), fmt.Sprintf(format, args...))
}

// printf prints to the output; steps print from the worker's goroutines.
func (s *shop) printf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, format, args...)
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

// define declares the workflow. Every step receives the order; later steps
// read the outputs of earlier ones with workflow.Output.
func (s *shop) define() *workflow.Definition {
	retry := workflow.WithTaskOptions(framework.WithMaxAttempts(5),
		framework.WithBackoff(framework.BackoffPolicy{Initial: 200 * time.Millisecond, Max: time.Second}))
	d := workflow.New("fulfil-order")

	workflow.Step(d, "reserve", func(ctx context.Context, o Order) (Reservation, error) {
		info, _ := workflow.Info(ctx)
		if err := s.inv.reserve(info.RunID, o.SKU, o.Qty); err != nil {
			return Reservation{}, framework.Permanent(err)
		}
		s.say(ctx, "reserved %d × %s (%d left)", o.Qty, o.SKU, s.inv.level(o.SKU))
		return Reservation{Key: info.RunID, Qty: o.Qty}, nil
	}, retry, workflow.Compensate(func(ctx context.Context, o Order, r Reservation) error {
		s.inv.release(r.Key, o.SKU)
		s.say(ctx, "released %d × %s (%d left)", r.Qty, o.SKU, s.inv.level(o.SKU))
		return nil
	}))

	workflow.Step(d, "charge", func(ctx context.Context, o Order) (Payment, error) {
		info, _ := workflow.Info(ctx)
		// The gateway is an external dependency: call it through its
		// circuit breaker. The run ID is the idempotency key.
		id, err := breaker.CallValue(ctx, "payments", func(ctx context.Context) (string, error) {
			return s.gw.charge(info.RunID, o.ID, o.Cents)
		})
		if err != nil {
			s.say(ctx, "attempt %d failed: %v (will retry)", info.Attempt, err)
			return Payment{}, err
		}
		s.say(ctx, "charged %s (%s)", money(o.Cents), id)
		return Payment{ID: id, Cents: o.Cents}, nil
	}, workflow.After("reserve"), retry, workflow.Compensate(func(ctx context.Context, o Order, p Payment) error {
		info, _ := workflow.Info(ctx)
		s.gw.refund(info.RunID)
		s.say(ctx, "refunded %s (%s)", money(p.Cents), p.ID)
		return nil
	}))

	workflow.Step(d, "ship", func(ctx context.Context, o Order) (Shipment, error) {
		res, err := workflow.Output[Reservation](ctx, "reserve")
		if err != nil {
			return Shipment{}, err
		}
		pay, err := workflow.Output[Payment](ctx, "charge")
		if err != nil {
			return Shipment{}, err
		}
		parcel, err := s.carrier.ship(o.Address)
		if err != nil {
			s.say(ctx, "failed: %v", err)
			return Shipment{}, framework.Permanent(err)
		}
		s.say(ctx, "shipped %d × %s paid by %s as %s", res.Qty, o.SKU, pay.ID, parcel)
		return Shipment{Parcel: parcel}, nil
	}, workflow.After("charge"), retry)
	return d
}

func money(cents int) string { return fmt.Sprintf("$%d.%02d", cents/100, cents%100) }

// orders and the status each run must end with.
var orders = []struct {
	order Order
	want  workflow.RunStatus
}{
	{Order{ID: "order-1", SKU: "lamp", Qty: 2, Cents: 4998, Address: "1 Main St"}, workflow.RunCompleted},
	{Order{ID: "order-2", SKU: "chair", Qty: 1, Cents: 8900, Address: "2 Side Rd"}, workflow.RunCompleted},
	{Order{ID: "order-3", SKU: "desk", Qty: 1, Cents: 31000, Address: "nowhere"}, workflow.RunFailed},
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("workflow", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 15*time.Second, "deadline for every run to end")
	verbose := fs.Bool("v", false, "log the framework's warnings and errors")
	url := fs.String("url", "", "run against the NATS server at this URL instead of an embedded one")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level := slog.LevelError + 1
	if *verbose {
		level = slog.LevelWarn
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	emb, err := testutil.Setup(ctx, *url, streams.Config{})
	if err != nil {
		return err
	}
	defer emb.Close()
	nc := emb.Conn

	// On a server of its own the run IDs are the order IDs. On an existing
	// server a suffix keeps them apart from earlier runs, which would be
	// found instead of started.
	runTag := ""
	if emb.URL() != "" {
		runTag = "-" + strconv.FormatInt(time.Now().UnixMilli(), 36)
	}

	s := &shop{inv: newInventory(), gw: newGateway("order-2"), carrier: carrier{refuse: "nowhere"}, out: stdout}
	def := s.define()

	// The worker runs the steps; several processes could run the same code.
	w, err := framework.NewWorker(nc, framework.WithLogger(logger))
	if err != nil {
		return err
	}
	// Circuit breakers for the payment step's breaker.CallValue.
	if _, err := breaker.Install(w); err != nil {
		return err
	}
	workflow.Register(w, def)
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = w.Shutdown(sctx)
	}()

	// The producer starts runs and follows them.
	fc, err := framework.NewClient(nc)
	if err != nil {
		return err
	}
	wf, err := workflow.NewClient(fc, def)
	if err != nil {
		return err
	}
	s.printf("workflow %s: %s\n\nprogress:\n", def.Name(), strings.Join(def.Steps(), " → "))
	for _, o := range orders {
		// The order ID is the run ID: starting an order twice is harmless.
		if _, err := wf.Start(ctx, def.Name(), o.order, workflow.WithRunID(o.order.ID+runTag)); err != nil {
			return err
		}
		s.printf("  %-8s started: %d × %s to %q\n", o.order.ID, o.order.Qty, o.order.SKU, o.order.Address)
	}

	runs := make([]*workflow.Run, len(orders))
	for i, o := range orders {
		if runs[i], err = wf.Wait(ctx, o.order.ID+runTag); err != nil {
			return err
		}
	}

	var failures []string
	s.mu.Lock() // late progress lines would interleave with the summary
	defer s.mu.Unlock()
	fmt.Fprintln(stdout, "\nsummary:")
	for i, o := range orders {
		r := runs[i]
		var steps []string
		for _, st := range r.Steps {
			steps = append(steps, fmt.Sprintf("%s=%s(%d)", st.Name, st.State, st.Attempts))
		}
		fmt.Fprintf(stdout, "  %-8s %-9s %s  in %v\n", r.ID, r.Status, strings.Join(steps, " "),
			r.EndedAt.Sub(r.CreatedAt).Round(time.Millisecond))
		if r.Error != "" {
			fmt.Fprintf(stdout, "  %-8s reason:   %s\n", "", r.Error)
		}
		if r.Status != o.want {
			failures = append(failures, fmt.Sprintf("%s ended %s, want %s", r.ID, r.Status, o.want))
		}
	}
	charged, refunded := s.gw.totals()
	fmt.Fprintf(stdout, "  payments: %s charged, %s refunded; stock: lamp %d, chair %d, desk %d\n",
		money(charged), money(refunded), s.inv.level("lamp"), s.inv.level("chair"), s.inv.level("desk"))
	if url := emb.URL(); url != "" {
		fmt.Fprintf(stdout, "  inspect the runs: go run ./cmd/jetflow -s %s workflows ls; ... workflows get %s\n", url, orders[2].order.ID+runTag)
	} else {
		fmt.Fprintf(stdout, "  on a reachable server (-url), inspect a run with: nats stream get %s --last-for %s\n",
			fc.Names().RunStream(), fc.Names().RunSubject(orders[2].order.ID))
	}
	if charged != 4998+8900 || refunded != 31000 || s.inv.level("desk") != 2 {
		failures = append(failures, "money or stock do not add up")
	}
	if len(failures) > 0 {
		return errors.New(strings.Join(failures, "; "))
	}
	return nil
}
