// Command payment shows side effects that happen once although their task
// runs several times.
//
// It starts an embedded nats-server and a fake payment gateway, then
// charges -orders orders, one task each. Every charge handler does three
// things: charge the order through the gateway (behind the circuit breaker
// of the "payments-gw" dependency), send a receipt e-mail, and book the
// payment in the accounting system. Two faults are injected:
//
//   - the gateway loses the response of the first charge request of every
//     fourth order: the card was charged, but the handler sees a timeout;
//   - the accounting system fails the first booking of every third order,
//     after the charge and the receipt went out.
//
// Both make the task run again. The charge and the e-mail are wrapped in
// effects.Once / effects.OnceValue, so the effects ledger records that
// they were applied and a retry skips them; the charge carries the task's
// idempotency key, so after a lost response (when the ledger cannot know
// whether the charge happened) the gateway recognises the retried request.
// The receipt (the charge ID) is stored as the task's result with task state
// tracking on, and the program shows one task's record.
//
// It prints
//
//	RESULT payment orders=N charged=N duplicate_charges=0 gateway_requests=R receipts=N duplicate_receipts=0
//
// and exits 0, or 1 when an order was charged or e-mailed twice (or not at
// all). With -no-ledger the handler calls the gateway and the mailer on
// every attempt: the gateway still deduplicates by idempotency key, the
// mailer cannot, and customers get duplicate receipts (the program then
// reports them and exits 0).
//
// Usage:
//
//	go run ./examples/payment [-orders 20] [-no-ledger] [-timeout 20s] [-url nats://127.0.0.1:4222]
//
// With -url it runs against an existing server instead of an embedded one
// (task IDs then get a suffix of the run, so that runs do not collide) and
// prints the jetflow CLI command that shows a task's record.
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
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/effects"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// dependency names the payment gateway's circuit breaker.
const dependency = "payments-gw"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "payment:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	orders   int
	noLedger bool
	timeout  time.Duration
	url      string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("payment", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.orders, "orders", 20, "orders to charge")
	fs.BoolVar(&c.noLedger, "no-ledger", false, "call the gateway and the mailer on every attempt, without the effects ledger")
	fs.DurationVar(&c.timeout, "timeout", 20*time.Second, "deadline for every order to be charged")
	fs.StringVar(&c.url, "url", "", "run against the NATS server at this URL instead of an embedded one")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.orders < 4 || c.timeout <= 0 {
		return c, errors.New("want -orders ≥ 4 and -timeout > 0")
	}
	return c, nil
}

// Order is the payload of a charge task.
type Order struct {
	ID          string `json:"id"`
	AmountCents int64  `json:"amount_cents"`
	Email       string `json:"email"`
}

// Receipt is the result stored with a charge task's record.
type Receipt struct {
	ChargeID string `json:"charge_id"`
}

// gateway is a fake payment gateway that deduplicates requests by
// idempotency key, as real ones do.
type gateway struct {
	mu       sync.Mutex
	byKey    map[string]string // idempotency key → charge ID
	charges  map[string]int    // order → charges applied
	requests int
	seen     map[string]bool // orders that already had a request
}

var errTimeout = errors.New("gateway: timeout waiting for the response")

// Charge charges an order once per idempotency key. The first request of
// every fourth order loses its response after the charge was applied.
func (g *gateway) Charge(_ context.Context, key string, o Order, n int) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.requests++
	first := !g.seen[o.ID]
	g.seen[o.ID] = true
	id, dup := g.byKey[key]
	if !dup {
		id = fmt.Sprintf("ch_%04d", len(g.byKey)+1)
		g.byKey[key] = id
		g.charges[o.ID]++
	}
	if first && n%4 == 0 {
		return "", errTimeout
	}
	return id, nil
}

// mailer sends receipts; it cannot deduplicate.
type mailer struct {
	mu   sync.Mutex
	sent map[string]int // order → receipts sent
}

func (m *mailer) Send(_ context.Context, o Order, chargeID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent[o.ID]++
	return nil
}

// accounting fails the first booking of every third order.
type accounting struct {
	mu     sync.Mutex
	failed map[string]bool
}

func (a *accounting) Book(_ context.Context, o Order, n int, chargeID string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if n%3 == 0 && !a.failed[o.ID] {
		a.failed[o.ID] = true
		return errors.New("accounting: service unavailable")
	}
	return nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))

	emb, err := testutil.Setup(ctx, cfg.url, streams.Config{})
	if err != nil {
		return err
	}
	defer emb.Close()
	nc := emb.Conn
	// On a server of its own the task IDs are the order IDs. On an existing
	// server a run suffix keeps them apart from earlier runs, whose IDs the
	// stream deduplicates and whose effects the ledger remembers.
	runTag := ""
	if url := emb.URL(); url != "" {
		runTag = "-" + strconv.FormatInt(time.Now().UnixMilli(), 36)
		fmt.Fprintf(stdout, "inspect it: go run ./cmd/jetflow -s %s tasks get order-12%s   (or: status, tasks ls --state retrying)\n", url, runTag)
	}

	gw := &gateway{byKey: map[string]string{}, charges: map[string]int{}, seen: map[string]bool{}}
	mail := &mailer{sent: map[string]int{}}
	books := &accounting{failed: map[string]bool{}}
	var retries atomic.Int64
	done := make(chan string, cfg.orders)

	w, err := framework.NewWorker(nc, framework.WithLogger(logger), framework.WithStateTracking(true),
		framework.WithHooks(framework.Hooks{
			Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
				switch o.Action {
				case framework.ActionRetry:
					retries.Add(1)
				case framework.ActionAck:
					done <- t.ID
				}
			},
		}))
	if err != nil {
		return err
	}
	if _, err := breaker.Install(w, breaker.WithSettings(dependency, breaker.Settings{OpenTimeout: 2 * time.Second})); err != nil {
		return err
	}
	framework.Handle(w, "payments.charge", func(ctx context.Context, t *framework.Task, o Order) error {
		n, _ := strconv.Atoi(o.ID[len("order-"):])
		charge := func(ctx context.Context) (string, error) {
			// The gateway call goes through the dependency's breaker; the
			// idempotency key is the same for every attempt of this task.
			return breaker.CallValue(ctx, dependency, func(ctx context.Context) (string, error) {
				return gw.Charge(ctx, framework.IdempotencyKey(ctx)+"/charge", o, n)
			})
		}
		receipt := func(chargeID string) func(ctx context.Context) error {
			return func(ctx context.Context) error { return mail.Send(ctx, o, chargeID) }
		}
		var chargeID string
		var err error
		if cfg.noLedger {
			chargeID, err = charge(ctx)
		} else {
			// After a lost response the ledger cannot know whether the
			// charge happened: run it again, the gateway deduplicates by
			// idempotency key.
			chargeID, err = effects.OnceValue(ctx, "charge", charge, effects.WithPolicy(effects.Rerun))
		}
		if err != nil {
			return err
		}
		if cfg.noLedger {
			err = receipt(chargeID)(ctx)
		} else {
			err = effects.Once(ctx, "receipt", receipt(chargeID))
		}
		if err != nil {
			return err
		}
		if err := books.Book(ctx, o, n, chargeID); err != nil {
			return framework.RetryAfterErr(50*time.Millisecond, err)
		}
		return framework.SetResult(ctx, Receipt{ChargeID: chargeID})
	}, breaker.WithDependencies(dependency),
		framework.WithBackoff(framework.BackoffPolicy{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond}))
	if err := w.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer scancel()
		_ = w.Shutdown(sctx)
	}()

	cl, err := framework.NewClient(nc)
	if err != nil {
		return err
	}
	for i := 1; i <= cfg.orders; i++ {
		o := Order{ID: fmt.Sprintf("order-%d", i), AmountCents: int64(1000 + i), Email: fmt.Sprintf("customer%d@example.com", i)}
		if _, err := cl.Enqueue(ctx, "payments.charge", o, framework.WithID(o.ID+runTag), framework.WithPriority(framework.PriorityCritical)); err != nil {
			return err
		}
	}
	for finished := 0; finished < cfg.orders; finished++ {
		select {
		case <-done:
		case <-ctx.Done():
			return fmt.Errorf("timed out after %v: %d of %d orders charged", cfg.timeout, finished, cfg.orders)
		}
	}

	// Show one task's record: state, attempts and result.
	insp := cl.Inspector()
	var rec *framework.TaskRecord
	for {
		rec, err = insp.GetTask(ctx, "order-12"+runTag)
		if err == nil && rec.State == framework.StateSucceeded {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no succeeded record for order-12: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	var r Receipt
	if err := rec.DecodeResult(&r); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "order-12: %s after %d attempts, charge %s (nats kv get %s order-12%s)\n",
		rec.State, rec.Attempt, r.ChargeID, streams.MustNames("").StateBucket(), runTag)

	gw.mu.Lock()
	mail.mu.Lock()
	charged, dupCharges, receipts, dupReceipts := 0, 0, 0, 0
	for i := 1; i <= cfg.orders; i++ {
		id := fmt.Sprintf("order-%d", i)
		if c := gw.charges[id]; c > 0 {
			charged++
			dupCharges += c - 1
		}
		if m := mail.sent[id]; m > 0 {
			receipts++
			dupReceipts += m - 1
		}
	}
	requests := gw.requests
	mail.mu.Unlock()
	gw.mu.Unlock()
	fmt.Fprintf(stdout, "%d orders, %d retried attempts (lost gateway responses and accounting failures)\n", cfg.orders, retries.Load())
	fmt.Fprintf(stdout, "RESULT payment orders=%d charged=%d duplicate_charges=%d gateway_requests=%d receipts=%d duplicate_receipts=%d\n",
		cfg.orders, charged, dupCharges, requests, receipts, dupReceipts)
	if charged != cfg.orders || dupCharges != 0 || receipts != cfg.orders {
		return fmt.Errorf("%d of %d orders charged, %d duplicate charges, %d receipts", charged, cfg.orders, dupCharges, receipts)
	}
	if dupReceipts != 0 && !cfg.noLedger {
		return fmt.Errorf("%d duplicate receipts despite the ledger", dupReceipts)
	}
	return nil
}
