// Command quickstart runs jetflow end to end on an embedded NATS server.
//
// It starts a nats-server with JetStream (listening on 127.0.0.1), creates the
// jetflow streams, enqueues a mix of payments (critical), reports (normal) and
// e-mails (low), some of them delayed by two seconds and one that fails twice
// before it succeeds, runs them on a worker while printing progress, prints a
// summary and exits. It exits with status 1 when a task does not finish
// within -timeout or ends differently than planned.
//
// Usage:
//
//	go run ./examples/quickstart [-port 4222] [-store DIR] [-url URL] [-serve] [-v] [-timeout 30s]
//
// With -serve it keeps the server and the worker running after the summary,
// prints nats and jetflow CLI commands to inspect them, and stops on Ctrl-C
// (SIGINT) or SIGTERM. With -url it uses an existing server instead of
// starting one, and leaves its tasks, dead letter and schedules there.
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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
)

// defaultPort is the port tried first; when it is taken and -port was not
// given, the server listens on a random free port instead.
const defaultPort = 4222

func main() {
	// Signals belong to the program, never to the library: SIGINT and
	// SIGTERM cancel ctx, and everything below shuts down through it.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "quickstart:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	port     int
	explicit bool // -port was given
	store    string
	url      string
	serve    bool
	verbose  bool
	timeout  time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("quickstart", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.port, "port", defaultPort, "client port on 127.0.0.1; -1 picks a random free port (the default falls back to one when 4222 is taken)")
	fs.StringVar(&c.store, "store", "", "JetStream store directory, kept after exit (default: a temporary directory, removed at exit)")
	fs.StringVar(&c.url, "url", "", "use the existing NATS server at this URL instead of starting one")
	fs.BoolVar(&c.serve, "serve", false, "keep running after the summary, print nats and jetflow CLI commands, stop on Ctrl-C")
	fs.BoolVar(&c.verbose, "v", false, "debug logging")
	fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "deadline for every task to finish")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.timeout <= 0 {
		return c, fmt.Errorf("-timeout %v: want > 0", c.timeout)
	}
	fs.Visit(func(f *flag.Flag) { c.explicit = c.explicit || f.Name == "port" })
	return c, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	nc, url, cleanup, err := connect(cfg, stdout)
	if err != nil {
		return err
	}
	defer cleanup()
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	gw := newGateway()
	prog := newProgress(stdout, declinedOrder)

	// README:begin
	// Create or update the streams. Idempotent: every process may call it.
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil {
		return err
	}

	// Enqueue a backlog before any worker runs: payments, reports and
	// e-mails at three priorities; a few delayed, one flaky, one declined.
	client, err := framework.NewClient(nc, framework.WithHooks(prog.hooks()))
	if err != nil {
		return err
	}
	infos, err := client.EnqueueMany(ctx, plan())
	if err != nil {
		return err
	}
	// One more, due in 2 s: the server holds it in a message schedule.
	// An Email names its task type (emails.send): see its TaskType.
	reminder, err := client.EnqueueArgs(ctx,
		Email{To: "ada@example.com", Template: "payment-reminder"},
		framework.WithPriority(framework.PriorityLow),
		framework.In(2*time.Second))
	if err != nil {
		return err
	}

	// A worker runs the handlers: one durable consumer per (type,
	// priority); when tasks wait for a free slot, critical ones start
	// first. The handler's error decides: nil acks, an error retries with
	// backoff, Permanent fails at once. Each handler serves the task type
	// its payload type names: a Charge can reach no other handler.
	worker, err := framework.NewWorker(nc,
		framework.WithConcurrency(4),
		framework.WithLogger(logger),
		framework.WithHooks(prog.hooks()),
	)
	if err != nil {
		return err
	}
	framework.HandleArgs(worker,
		func(ctx context.Context, t *framework.Task, c Charge) error {
			err := gw.Charge(ctx, c)
			if errors.Is(err, errCardDeclined) {
				return framework.Permanent(err) // retrying cannot help
			}
			return err
		},
		framework.WithServedPriorities(framework.PriorityCritical),
		framework.WithMaxAttempts(5),
		framework.WithBackoff(framework.BackoffPolicy{Initial: 200 * time.Millisecond}),
	)
	framework.HandleArgs(worker, buildReport,
		framework.WithServedPriorities(framework.PriorityNormal),
		framework.WithTimeout(time.Minute),
	)
	framework.HandleArgs(worker, sendEmail,
		framework.WithServedPriorities(framework.PriorityLow),
		framework.WithTypeConcurrency(2),
	)
	if err := worker.Start(ctx); err != nil {
		return err
	}
	// README:end
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := worker.Shutdown(sctx); err != nil {
			logger.Warn("worker shutdown", slog.Any("error", err))
		}
	}()

	delayed := 0
	for _, info := range append(infos, reminder) {
		if !info.ScheduledFor.IsZero() {
			delayed++
		}
	}
	prog.live(fmt.Sprintf("streams: %s\nenqueued %d tasks: %s; %d of them delayed by 2s\n\n",
		ensured(rep), prog.total(), prog.breakdown(), delayed))

	deadline := time.NewTimer(cfg.timeout)
	defer deadline.Stop()
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
wait:
	for {
		select {
		case <-prog.allDone:
			break wait
		case <-ticker.C:
			prog.statsLine(worker.Stats())
		case <-deadline.C:
			return fmt.Errorf("timed out after %v: %d of %d tasks did not finish: %s",
				cfg.timeout, prog.remaining(), prog.total(), prog.missing())
		case <-ctx.Done():
			return fmt.Errorf("interrupted with %d of %d tasks unfinished", prog.remaining(), prog.total())
		}
	}
	if err := prog.summary(); err != nil {
		return err
	}
	if !cfg.serve {
		if cfg.url != "" {
			fmt.Fprintf(stdout, "\nthe declined payment stays in the dead letters on %[1]s:\n  go run ./cmd/jetflow -s %[1]s dlq ls\n", url)
		}
		return nil
	}
	return serve(ctx, stdout, client, url)
}

// serve keeps the worker running until ctx ends and prints how to inspect
// the server with the nats CLI.
func serve(ctx context.Context, stdout io.Writer, client *framework.Client, url string) error {
	// A task due in an hour stays in the schedule stream (the worker's delay
	// mover writes it there), so that there is something to look at.
	later, err := client.EnqueueArgs(ctx, Report{Name: "revenue", Period: "quarter"},
		framework.In(time.Hour))
	if err != nil {
		return err
	}
	// A repeating schedule, so that there is a next fire time to look at.
	nightly := schedule.Definition{Name: "quickstart-nightly", Spec: "0 0 2 * * *", Type: Report{}.TaskType(),
		Payload: Report{Name: "revenue", Period: "day"}}
	if _, err := schedule.New(client).Register(ctx, nightly); err != nil {
		return err
	}
	names := client.Names()
	cli := "nats -s " + url
	fmt.Fprintf(stdout, `
Serving on %[1]s until Ctrl-C. Inspect it with the nats CLI
(go install github.com/nats-io/natscli/nats@v0.5.0):

  %[2]s stream ls
  %[2]s stream subjects %[3]s
  %[2]s consumer ls %[3]s
  %[2]s consumer info %[3]s %[4]s
  %[2]s stream get %[8]s --last-for %[5]s

The last one shows the schedule of a report due at %[6]s.
Enqueue a task by hand; the worker picks it up:

  %[2]s pub %[7]s '{"to":"you@example.com","template":"welcome"}'

Or with the jetflow CLI (go run ./cmd/jetflow, or go install ./cmd/jetflow):

  jetflow -s %[1]s status
  jetflow -s %[1]s dlq ls
  jetflow -s %[1]s tasks ls --state scheduled
  jetflow -s %[1]s cron ls

`, url, cli, names.TaskStream(), names.ConsumerName("payments.charge", framework.PriorityCritical),
		names.ScheduleSubject(later.ID), later.ScheduledFor.Local().Format(time.TimeOnly),
		names.TaskSubject(framework.PriorityLow, "emails.send"), names.ScheduleStream())
	<-ctx.Done()
	fmt.Fprintln(stdout, "\nstopping")
	cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Remove the pending schedules, in case the store is kept (-store).
	if err := client.Cancel(cctx, later.ID); err != nil && !errors.Is(err, framework.ErrNotFound) {
		return err
	}
	if err := schedule.New(client).Remove(cctx, nightly.Name); err != nil && !errors.Is(err, framework.ErrNotFound) {
		return err
	}
	return nil
}

// ensured says what streams.Ensure did.
func ensured(rep *streams.Report) string {
	var parts []string
	for _, r := range []struct {
		verb  string
		names []string
	}{{"created", rep.Created}, {"updated", rep.Updated}, {"unchanged", rep.Unchanged}} {
		if len(r.names) > 0 {
			parts = append(parts, r.verb+" "+strings.Join(r.names, ", "))
		}
	}
	return strings.Join(parts, "; ")
}

// Charge asks the payment gateway to charge an order.
type Charge struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
	Currency    string `json:"currency"`
}

// TaskType names the task type of a Charge (framework.TaskArgs).
func (Charge) TaskType() string { return "payments.charge" }

// Email sends one templated e-mail.
type Email struct {
	To       string `json:"to"`
	Template string `json:"template"`
}

// TaskType names the task type of an Email.
func (Email) TaskType() string { return "emails.send" }

// Report builds one report for a period.
type Report struct {
	Name   string `json:"name"`
	Period string `json:"period"`
}

// TaskType names the task type of a Report.
func (Report) TaskType() string { return "reports.build" }

// plan is the backlog the quickstart enqueues.
func plan() []framework.TaskSpec {
	critical := framework.WithPriority(framework.PriorityCritical)
	low := framework.WithPriority(framework.PriorityLow)
	jobs := []framework.TaskSpec{
		framework.Spec(Charge{"ord-1001", 4999, "EUR"}, critical),
		framework.Spec(Charge{"ord-1002", 1250, "EUR"}, critical),
		// The gateway answers 503 twice for this order, then accepts it.
		framework.Spec(Charge{"ord-1003", 8900, "USD"}, critical),
		// The gateway declines this card: a permanent failure, not retried.
		framework.Spec(Charge{"ord-1004", 300, "EUR"}, critical),
		framework.Spec(Charge{"ord-1005", 15000, "GBP"}, critical),
		framework.Spec(Report{"sales", "day"}),
		framework.Spec(Report{"signups", "week"}),
		framework.Spec(Report{"churn", "month"}),
		framework.Spec(Report{"inventory", "night"}, framework.In(2*time.Second)),
	}
	for i, tmpl := range []string{"welcome", "receipt", "receipt", "welcome", "password-reset", "receipt", "welcome", "newsletter", "receipt", "welcome"} {
		to := fmt.Sprintf("user%02d@example.com", i+1)
		jobs = append(jobs, framework.Spec(Email{to, tmpl}, low))
	}
	return jobs
}

const (
	flakyOrder    = "ord-1003"
	declinedOrder = "ord-1004"
)

var (
	errUnavailable  = errors.New("gateway: 503 service unavailable")
	errCardDeclined = errors.New("gateway: card declined")
)

// gateway stands in for a payment provider: it is briefly unavailable for one
// order and declines another.
type gateway struct {
	mu      sync.Mutex
	outages map[string]int // order ID → calls still answered with 503
}

func newGateway() *gateway {
	return &gateway{outages: map[string]int{flakyOrder: 2}}
}

// Charge calls the pretend provider.
func (g *gateway) Charge(ctx context.Context, c Charge) error {
	if err := work(ctx, 40*time.Millisecond); err != nil {
		return err
	}
	if c.OrderID == declinedOrder {
		return errCardDeclined
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.outages[c.OrderID] > 0 {
		g.outages[c.OrderID]--
		return errUnavailable
	}
	return nil
}

func sendEmail(ctx context.Context, t *framework.Task, e Email) error {
	return work(ctx, 20*time.Millisecond)
}

func buildReport(ctx context.Context, t *framework.Task, r Report) error {
	return work(ctx, 150*time.Millisecond)
}

// work pretends to do something for d, or gives up when ctx ends.
func work(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
