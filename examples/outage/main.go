// Command outage shows a circuit breaker riding out an outage of a payment
// gateway.
//
// It starts an embedded nats-server and a fake payment gateway (an HTTP
// server on 127.0.0.1), queues -tasks charges, and runs them on two workers,
// each on its own connection, while an unrelated task type (e-mails) keeps
// being enqueued. After a tenth of the charges the gateway answers 503 for
// -outage. The breaker of "payments-gw" opens, the charge consumers are
// paused cluster-wide, charges already fetched wait in process without
// spending attempts, the e-mails keep flowing, and after the outage the
// half-open probes close the breaker and every charge completes.
//
// It ends by printing
//
//	RESULT outage tasks=N completed=N dead=0 calls_during_outage=K
//
// and exits 0, or 1 when a charge did not complete or ended in the dead
// letters. With -no-breaker the breaker counts nothing (it never opens), so
// K shows how hard plain retries with backoff hit the gateway during the
// same outage.
//
// Usage:
//
//	go run ./examples/outage [-tasks 1000] [-outage 3s] [-no-breaker] [-v] [-timeout 25s] [-url nats://127.0.0.1:4222]
//
// With -url it runs against an existing server instead of an embedded one
// and prints the jetflow CLI commands that show the breaker and the paused
// queue while it runs.
package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

const dependency = "payments-gw"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "outage:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	tasks     int
	outage    time.Duration
	noBreaker bool
	verbose   bool
	timeout   time.Duration
	url       string
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("outage", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&c.tasks, "tasks", 1000, "charges to queue")
	fs.DurationVar(&c.outage, "outage", 3*time.Second, "how long the gateway answers 503")
	fs.BoolVar(&c.noBreaker, "no-breaker", false, "never open the breaker: plain retries with backoff, for comparison")
	fs.BoolVar(&c.verbose, "v", false, "log the workers' info messages")
	fs.DurationVar(&c.timeout, "timeout", 25*time.Second, "deadline for every charge to complete")
	fs.StringVar(&c.url, "url", "", "run against the NATS server at this URL instead of an embedded one")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.tasks < 10 || c.outage <= 0 || c.timeout <= 0 {
		return c, fmt.Errorf("want -tasks ≥ 10, -outage > 0, -timeout > 0")
	}
	return c, nil
}

// Charge asks the payment gateway to charge an order.
type Charge struct {
	OrderID     string `json:"order_id"`
	AmountCents int64  `json:"amount_cents"`
}

// Email sends one templated e-mail.
type Email struct {
	To string `json:"to"`
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	// Hooks and the gateway print from their own goroutines.
	stdout = &syncWriter{w: stdout}
	level := slog.LevelWarn + 1 // held and retried tasks log warnings by design
	if cfg.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	start := time.Now()
	since := func() string { return fmt.Sprintf("+%5.2fs", time.Since(start).Seconds()) }

	emb, err := testutil.Setup(ctx, cfg.url, streams.Config{}, nats.Name("outage-client"))
	if err != nil {
		return err
	}
	defer emb.Close()
	if url := emb.URL(); url != "" {
		fmt.Fprintf(stdout, "inspect it while it runs: go run ./cmd/jetflow -s %s breakers   (or: status --watch)\n", url)
	}
	nc := emb.Conn

	gw := newGateway(cfg.tasks/10, cfg.outage, func(what string) { fmt.Fprintf(stdout, "%s gateway: %s\n", since(), what) })
	defer gw.Close()
	client, err := framework.NewClient(nc)
	if err != nil {
		return err
	}

	var (
		mu        sync.Mutex
		completed = make(map[string]bool)
		dead      atomic.Int64
		emails    atomic.Int64
		emailsOut atomic.Int64 // sent while the gateway was down
		allDone   = make(chan struct{})
	)
	settings := breaker.Settings{
		ConsecutiveFailures: 5,
		OpenTimeout:         time.Second,
		HalfOpenMaxRequests: 1,
	}
	if cfg.noBreaker {
		settings.IsFailure = func(error) bool { return false } // counts nothing, never opens
	}
	httpClient := &http.Client{Timeout: 5 * time.Second}
	defer httpClient.CloseIdleConnections()
	workers := make([]*framework.Worker, 2)
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
				Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
					if o.Action == framework.ActionFail {
						dead.Add(1)
						logger.Error("task failed for good", "task_type", t.Type, "task_id", t.ID, "error", o.Err)
						return
					}
					if o.Action != framework.ActionAck {
						return
					}
					if t.Type == "emails.send" {
						emails.Add(1)
						if gw.down() {
							emailsOut.Add(1)
						}
						return
					}
					mu.Lock()
					completed[t.ID] = true
					if len(completed) == cfg.tasks {
						close(allDone)
					}
					mu.Unlock()
				},
				Event: func(_ context.Context, ev any) {
					if c, ok := ev.(breaker.StateChange); ok {
						fmt.Fprintf(stdout, "%s %s: breaker %s %s -> %s\n", since(), name, c.Dependency, c.From, c.To)
					}
				},
			}),
		)
		if err != nil {
			return err
		}
		// The worker's circuit breakers: DoHTTP calls the gateway through
		// the breaker of dependency.
		if _, err := breaker.Install(w, breaker.WithSettings(dependency, settings)); err != nil {
			return err
		}
		framework.Handle(w, "payments.charge", func(ctx context.Context, _ *framework.Task, c Charge) error {
			body, _ := json.Marshal(c)
			req, err := http.NewRequest(http.MethodPost, gw.URL+"/charges", bytes.NewReader(body))
			if err != nil {
				return framework.Permanent(err)
			}
			resp, err := handlers.DoHTTP(ctx, httpClient, dependency, req)
			if err != nil {
				return err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.Body.Close()
		},
			breaker.WithDependencies(dependency),
			framework.WithBackoff(framework.BackoffPolicy{Initial: 200 * time.Millisecond, Max: 2 * time.Second}),
		)
		framework.Handle(w, "emails.send", func(context.Context, *framework.Task, Email) error { return nil })
		if err := w.Start(ctx); err != nil {
			return err
		}
		workers[i] = w
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, w := range workers {
			if w != nil {
				_ = w.Shutdown(sctx)
			}
		}
	}()

	jobs := make([]framework.TaskSpec, cfg.tasks)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: "payments.charge", Payload: Charge{OrderID: fmt.Sprintf("ord-%04d", i), AmountCents: 1999}}
	}
	if _, err := client.EnqueueMany(ctx, jobs); err != nil {
		return err
	}
	mode := "breaker on"
	if cfg.noBreaker {
		mode = "no breaker"
	}
	fmt.Fprintf(stdout, "%s queued %d charges on 2 workers (%s); the gateway fails for %v after %d charges\n",
		since(), cfg.tasks, mode, cfg.outage, cfg.tasks/10)

	// Unrelated work: an e-mail every 20 ms until the charges are done.
	stopMail := make(chan struct{})
	mailDone := make(chan struct{})
	go func() {
		defer close(mailDone)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopMail:
				return
			case <-tick.C:
				_, _ = client.Enqueue(ctx, "emails.send", Email{To: "ops@example.com"})
			}
		}
	}()
	deadline := time.NewTimer(cfg.timeout)
	defer deadline.Stop()
	var waitErr error
	select {
	case <-allDone:
	case <-deadline.C:
		waitErr = fmt.Errorf("timed out after %v", cfg.timeout)
	case <-ctx.Done():
		waitErr = ctx.Err()
	}
	close(stopMail)
	<-mailDone

	mu.Lock()
	done := len(completed)
	mu.Unlock()
	calls, outageCalls := gw.counts()
	fmt.Fprintf(stdout, "%s done: gateway calls %d in all, %d during the outage; e-mails sent %d, %d of them during the outage\n",
		since(), calls, outageCalls, emails.Load(), emailsOut.Load())
	for i, w := range workers {
		for _, in := range breaker.Of(w).States() {
			fmt.Fprintf(stdout, "worker-%d breaker %s: %s, last opened %s\n", i+1, in.Dependency, in.State, rel(start, in.OpenedAt))
		}
	}
	fmt.Fprintf(stdout, "RESULT outage tasks=%d completed=%d dead=%d calls_during_outage=%d\n",
		cfg.tasks, done, dead.Load(), outageCalls)
	if waitErr != nil {
		return waitErr
	}
	if done != cfg.tasks || dead.Load() != 0 {
		return fmt.Errorf("%d of %d charges completed, %d dead", done, cfg.tasks, dead.Load())
	}
	return nil
}

func rel(start, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	return fmt.Sprintf("at +%.2fs", t.Sub(start).Seconds())
}

// gateway is a fake payment gateway: it charges in about 2 ms, and after
// `after` successful charges answers 503 for `outage`.
type gateway struct {
	*httptest.Server
	after  int
	outage time.Duration
	report func(string)

	mu          sync.Mutex
	ok          int
	downFrom    time.Time
	downUntil   time.Time
	backUp      *time.Timer
	calls       int
	outageCalls int
}

func newGateway(after int, outage time.Duration, report func(string)) *gateway {
	g := &gateway{after: after, outage: outage, report: report}
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	return g
}

func (g *gateway) serve(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	now := time.Now()
	g.mu.Lock()
	g.calls++
	down := !g.downFrom.IsZero() && now.Before(g.downUntil)
	if down {
		g.outageCalls++
	}
	g.mu.Unlock()
	if down {
		http.Error(w, "payment gateway under maintenance", http.StatusServiceUnavailable)
		return
	}
	time.Sleep(2 * time.Millisecond) // the gateway's own latency
	g.mu.Lock()
	g.ok++
	if g.ok == g.after && g.downFrom.IsZero() {
		g.downFrom = time.Now()
		g.downUntil = g.downFrom.Add(g.outage)
		g.report(fmt.Sprintf("down for %v (503 to every request)", g.outage))
		g.backUp = time.AfterFunc(g.outage, func() { g.report("back up") })
	}
	g.mu.Unlock()
	_, _ = io.WriteString(w, `{"status":"charged"}`)
}

// Close stops the gateway.
func (g *gateway) Close() {
	g.Server.Close()
	g.mu.Lock()
	if g.backUp != nil {
		g.backUp.Stop()
	}
	g.mu.Unlock()
}

func (g *gateway) down() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	return !g.downFrom.IsZero() && now.Before(g.downUntil)
}

func (g *gateway) counts() (calls, outageCalls int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls, g.outageCalls
}

// syncWriter serialises writes.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
