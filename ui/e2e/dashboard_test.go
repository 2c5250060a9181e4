// Package e2e drives the jetflow dashboard in a real headless Chromium
// against an embedded NATS server with real tasks. It is a module of its own
// so that the browser driver never reaches the main module's dependencies.
//
// Run it with Debian's chromium installed (`apt-get install chromium`):
//
//	cd ui/e2e && go test -race ./...
//
// Without a browser the test is skipped, unless CI is set, where it fails.
// With -update-screenshots it writes a PNG of every page to
// docs/screenshots/.
package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/ui"
	"github.com/jetflow-io/jetflow/workflow"
)

var updateScreenshots = flag.Bool("update-screenshots", false, "write a screenshot of every page to docs/screenshots")

// waitLong bounds every wait; a correct run never gets near it.
const waitLong = 60 * time.Second

// browserPath finds Chromium.
func browserPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium found: .ci/run installs Debian's chromium package")
	}
	t.Skip("no Chromium found (apt-get install chromium)")
	return ""
}

// browser starts a headless Chromium with a fresh profile and returns a tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(browserPath(t)),
		chromedp.Headless,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.WindowSize(1360, 900),
	}
	// Chromium started on a busy machine sometimes exits before it
	// serves its DevTools socket ("chrome failed to start"): start it
	// here, once more after such a failure, so that a test's own steps
	// never see it.
	var err error
	for range 2 {
		actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(opts, chromedp.UserDataDir(t.TempDir()))...)
		ctx, cancel := chromedp.NewContext(actx)
		if _, err = chromedp.Run(ctx, chromedp.Evaluate[int]("1")); err == nil {
			t.Cleanup(cancelAlloc)
			t.Cleanup(cancel)
			return ctx
		}
		cancel()
		cancelAlloc()
		t.Logf("start Chromium: %v", err)
	}
	t.Fatalf("start Chromium twice: %v", err)
	return nil
}

// app is the system under test: a server, a worker with real handlers, a
// client, and the dashboard mounted at /ops/.
type app struct {
	cl      *framework.Client
	wf      *workflow.Client
	ins     *framework.Inspector
	op      *inspect.Operator
	web     *httptest.Server
	decline atomic.Bool // pay.charge fails permanently while set
	// produced, produceErrs and mailed count the producer's enqueues, its
	// failed enqueues and the mail.send tasks that completed: what a failed
	// overview reports.
	produced, produceErrs, mailed atomic.Int64
	ran                           chan string // IDs of pay.charge and mail.send tasks that completed
	workerID                      string      // the worker's ID in the registry
}

func startApp(t *testing.T) *app {
	t.Helper()
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	ctx := t.Context()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	a := &app{cl: cl, ins: cl.Inspector(), op: inspect.New(cl), ran: make(chan string, 4096)}
	a.decline.Store(true)

	order := workflow.New("order")
	workflow.Step(order, "reserve", func(ctx context.Context, n int) (int, error) { return n, nil })
	workflow.Step(order, "charge", func(ctx context.Context, n int) (int, error) { return n * 100, nil }, workflow.After("reserve"))
	workflow.Step(order, "email", func(ctx context.Context, n int) (string, error) { return "sent", nil }, workflow.After("reserve"))
	workflow.Step(order, "ship", func(ctx context.Context, n int) (string, error) {
		if n < 0 {
			return "", framework.Permanent(errors.New("no address"))
		}
		return "shipped", nil
	}, workflow.After("charge", "email"))
	a.wf, err = workflow.NewClient(cl, order)
	if err != nil {
		t.Fatal(err)
	}

	w, err := framework.NewWorker(testutil.Connect(t, srv), framework.WithStateTracking(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := breaker.Install(w, breaker.WithSettings("partner", breaker.Settings{ConsecutiveFailures: 2, OpenTimeout: time.Hour})); err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("mail.send", func(ctx context.Context, task *framework.Task) error {
		// Some work, so that the backlog chart has something to show.
		select {
		case <-time.After(20 * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
		// The producer's traffic runs until the test stops it: when
		// nobody has read completions for a while, drop them rather than
		// block the handler. The tests that wait for a mail.send task
		// drain the channel first.
		a.mailed.Add(1)
		select {
		case a.ran <- task.ID:
		default:
		}
		return nil
	}, framework.WithTypeConcurrency(2))
	w.HandleFunc("pay.charge", func(ctx context.Context, task *framework.Task) error {
		if a.decline.Load() {
			return framework.Permanent(errors.New("card declined"))
		}
		a.ran <- task.ID
		return nil
	})
	w.HandleFunc("partner.sync", func(ctx context.Context, task *framework.Task) error {
		return breaker.Call(ctx, "partner", func(context.Context) error { return errors.New("503 from partner") })
	}, breaker.WithDependencies("partner"), framework.WithMaxAttempts(1))
	// Its handler decodes payload versions 1 and 2: a version 3 task is
	// handed back, and the Workers page says no live worker accepts it.
	w.HandleFunc("invoice.render", func(context.Context, *framework.Task) error { return nil }, framework.AcceptVersions(1, 2))
	// An ordered type in two lanes: the tasks of key acct-hold wait until
	// the test ends, so the Keys page shows its lane's owner running one.
	hold := make(chan struct{})
	w.HandleFunc("ledger.post", func(ctx context.Context, task *framework.Task) error {
		if task.Header(framework.HeaderOrderingKey) == "acct-hold" {
			select {
			case <-hold:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}, framework.WithOrdering(framework.Ordering{Lanes: 2}))
	workflow.Register(w, order)
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	a.workerID = w.ID()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(sctx)
	})
	t.Cleanup(func() { close(hold) }) // before the shutdown

	h, err := ui.New(nc, ui.Options{RefreshInterval: 500 * time.Millisecond, Title: "jetflow demo"})
	if err != nil {
		t.Fatal(err)
	}
	ro, err := ui.New(nc, ui.Options{RefreshInterval: 500 * time.Millisecond, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	mux.Handle("/ro/", http.StripPrefix("/ro", ro))
	a.web = httptest.NewServer(mux)
	t.Cleanup(a.web.Close)
	return a
}

func (a *app) enqueue(t *testing.T, typ string, payload any, opts ...framework.EnqueueOption) framework.TaskInfo {
	t.Helper()
	info, err := a.cl.Enqueue(t.Context(), typ, payload, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// produce enqueues mail.send tasks every interval until ctx ends: live
// traffic for the charts, however long the pages before them take. A failed
// enqueue is logged and the next tick tries again, so that the traffic never
// stops silently.
func (a *app) produce(ctx context.Context, t *testing.T, interval time.Duration) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if _, err := a.cl.Enqueue(ctx, "mail.send", map[string]string{"to": "someone@example.com"}); err != nil {
			if ctx.Err() == nil {
				a.produceErrs.Add(1)
				t.Logf("producer: %v", err)
			}
			continue
		}
		a.produced.Add(1)
	}
}

// page opens the dashboard at route and waits for it to render.
func page(t *testing.T, ctx context.Context, a *app, route, name string) {
	t.Helper()
	pageAt(t, ctx, a.web.URL+"/ops/#/"+route, name)
}

// pageAt opens url and waits for the page name to render.
func pageAt(t *testing.T, ctx context.Context, url, name string) {
	t.Helper()
	route := url
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("navigate %s: %v", route, err)
	}
	waitJS(t, ctx, fmt.Sprintf(`document.getElementById("main").dataset.page === %q && !!document.getElementById("main").dataset.loaded`, name),
		"page "+route+" rendered")
}

// waitJS polls expr in the page until it is truthy.
func waitJS(t *testing.T, ctx context.Context, expr, what string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(waitLong), chromedp.WithPollingInterval(50*time.Millisecond))); err != nil {
		banner, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById("banner").textContent + " | " + document.getElementById("main").innerHTML.slice(0, 1500)`))
		t.Fatalf("waiting for %s: %v (page %q)", what, err, banner)
	}
}

// text returns the text of the first element matching css, "" if none.
func text(t *testing.T, ctx context.Context, css string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, css)))
	if err != nil {
		t.Fatalf("text of %s: %v", css, err)
	}
	return strings.TrimSpace(s)
}

// click clicks the first element matching css once it exists.
func click(t *testing.T, ctx context.Context, css string) {
	t.Helper()
	waitJS(t, ctx, fmt.Sprintf(`(() => { const e = document.querySelector(%q); if (!e) return false; e.click(); return true; })()`, css), "click "+css)
}

// confirm answers the confirmation dialog, which must be open.
func confirm(t *testing.T, ctx context.Context, ok bool) {
	t.Helper()
	waitJS(t, ctx, `!document.getElementById("modal").hidden`, "confirmation dialog")
	if ok {
		click(t, ctx, "#modal-ok")
	} else {
		click(t, ctx, "#modal-cancel")
	}
	waitJS(t, ctx, `document.getElementById("modal").hidden`, "dialog closed")
}

// count returns how many elements match css.
func count(t *testing.T, ctx context.Context, css string) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](fmt.Sprintf(`document.querySelectorAll(%q).length`, css)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot %s: not a PNG (%d bytes)", name, len(png))
	}
	if !*updateScreenshots {
		return
	}
	dir := filepath.Join("..", "..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// waitRan waits until task id completed, skipping other completions.
func waitRan(t *testing.T, a *app, id string) {
	t.Helper()
	deadline := time.After(waitLong)
	for {
		select {
		case got := <-a.ran:
			if got == id {
				return
			}
		case <-deadline:
			t.Fatalf("task %s did not run", id)
		}
	}
}

func TestDashboard(t *testing.T) {
	a := startApp(t)
	ctx := browser(t)
	tctx := t.Context()

	// Fixed state whose numbers the pages must show.
	if _, err := topology.EnsureConsumer(tctx, a.cl.JetStream(), a.cl.Names(), topology.ConsumerSpec{TaskType: "export.csv"}); err != nil {
		t.Fatal(err)
	}
	for range 7 {
		a.enqueue(t, "export.csv", map[string]string{"report": "monthly"}) // no worker serves it: 7 wait
	}
	for _, id := range []string{"p1", "p2", "p3"} {
		a.enqueue(t, "pay.charge", map[string]int{"cents": 1999}, framework.WithID(id), framework.WithPriority(framework.PriorityCritical))
	}
	a.enqueue(t, "mail.send", map[string]string{"to": "later@example.com"}, framework.In(time.Hour), framework.WithID("later-1"))
	a.enqueue(t, "export.csv", nil, framework.In(2*time.Hour), framework.WithID("later-2"))
	if _, err := schedule.New(a.cl).Register(tctx, schedule.Definition{Name: "nightly-report", Spec: "0 30 2 * * *", TimeZone: "Europe/Paris", Type: "export.csv"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		a.enqueue(t, "partner.sync", nil)
	}
	okRun, err := a.wf.Start(tctx, "order", 3)
	if err != nil {
		t.Fatal(err)
	}
	badRun, err := a.wf.Start(tctx, "order", -1)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{okRun, badRun} {
		if _, err := a.wf.Wait(tctx, id); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Wait(t, waitLong, "three dead payments and an open breaker", func() bool {
		st, err := a.op.QueueStats(tctx)
		if err != nil {
			t.Fatal(err)
		}
		br, err := a.op.BreakerRecords(tctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.Dead["pay.charge"] == 3 && len(br) == 1 && br[0].State == breaker.StateOpen
	})
	pctx, stopProducer := context.WithCancel(tctx)
	produced := make(chan struct{})
	go func() { defer close(produced); a.produce(pctx, t, 15*time.Millisecond) }()
	t.Cleanup(func() { stopProducer(); <-produced })

	t.Run("overview", func(t *testing.T) {
		defer func() {
			if t.Failed() {
				t.Logf("mail.send traffic: %d enqueued, %d enqueues failed, %d completed",
					a.produced.Load(), a.produceErrs.Load(), a.mailed.Load())
			}
		}()
		page(t, ctx, a, "", "overview")
		waitJS(t, ctx, `document.querySelector('[data-queue="export.csv/normal"] [data-col=waiting]')?.textContent === "7"`, "export.csv waiting 7")
		// The dead-letter total includes partner.sync's, written while its
		// breaker opened: compare with what the server holds now.
		var card string
		dead := 0
		testutil.Wait(t, waitLong, "dead-letter card equal to the server's count", func() bool {
			st, err := a.op.QueueStats(tctx)
			if err != nil {
				t.Fatal(err)
			}
			dead = 0
			for _, n := range st.Dead {
				dead += int(n)
			}
			card = text(t, ctx, "#card-dead .value")
			return card == fmt.Sprint(dead)
		})
		if dead < 3 {
			t.Errorf("dead letters %d, want at least the 3 payments", dead)
		}
		if got := text(t, ctx, "#card-scheduled .value"); got != "2" {
			t.Errorf("scheduled card %q, want 2", got)
		}
		if got := text(t, ctx, "#card-cron .value"); got != "1" {
			t.Errorf("cron card %q, want 1", got)
		}
		if got := text(t, ctx, `[data-queue="pay.charge/critical"] [data-col=dead]`); got != "3" {
			t.Errorf("pay.charge dead cell %q, want 3", got)
		}
		// Live charts: wait for a dozen refreshes with mail traffic.
		waitJS(t, ctx, `(document.querySelector('#chart-throughput path[data-series="mail.send/normal"]')?.getAttribute("d") || "").split("L").length >= 12`, "throughput chart filled")
		// Worker counts: the app's one worker serves mail.send; nobody
		// serves export.csv, whose tasks wait: flagged.
		waitJS(t, ctx, `document.querySelector('[data-queue="mail.send/normal"] [data-col=workers]')?.textContent === "1"`, "mail.send served by 1 worker")
		if got := text(t, ctx, `[data-queue="export.csv/normal"] [data-col=workers]`); got != "0" {
			t.Errorf("export.csv workers cell %q, want 0", got)
		}
		if n := count(t, ctx, `[data-queue="export.csv/normal"] .badge.no-worker`); n != 1 || text(t, ctx, "#no-worker-note") == "" {
			t.Errorf("export.csv not flagged as served by no live worker (%d badges)", n)
		}
		if n := count(t, ctx, `[data-queue="mail.send/normal"] .badge.no-worker`); n != 0 {
			t.Error("mail.send flagged as served by no live worker")
		}
		screenshot(t, ctx, "overview")
	})

	t.Run("workers", func(t *testing.T) {
		page(t, ctx, a, "workers", "workers")
		waitJS(t, ctx, `document.querySelectorAll("[data-worker]").length === 1`, "one worker listed")
		row := text(t, ctx, "[data-worker]")
		for _, want := range []string{"mail.send", "pay.charge", "partner.sync", "critical, high, normal, low"} {
			if !strings.Contains(row, want) {
				t.Errorf("worker row %q lacks %q", row, want)
			}
		}
		if got := text(t, ctx, "[data-worker] [data-col=busy]"); !strings.HasSuffix(got, fmt.Sprintf("/ %d", framework.DefaultConcurrency)) {
			t.Errorf("busy cell %q, want n / %d", got, framework.DefaultConcurrency)
		}
		// A type's link filters the page to the workers serving it.
		click(t, ctx, `[data-worker] a[href="#/workers?type=mail.send"]`)
		waitJS(t, ctx, `location.hash === "#/workers?type=mail.send" && document.querySelectorAll("[data-worker]").length === 1`, "filtered to mail.send")
		page(t, ctx, a, "workers?type=export.csv", "workers")
		waitJS(t, ctx, `document.querySelectorAll("[data-worker]").length === 0 && document.getElementById("main").textContent.includes("No live worker serves export.csv")`, "nobody serves export.csv")
		// A payload version no live worker accepts is flagged above the
		// table; the type's row says which versions the worker takes.
		a.enqueue(t, "invoice.render", map[string]string{"invoice": "2026-117"}, framework.PayloadVersion(3))
		page(t, ctx, a, "workers", "workers")
		waitJS(t, ctx, `document.querySelectorAll("[data-worker]").length === 1`, "one worker listed")
		waitJS(t, ctx, `!!document.querySelector('[data-unserved="invoice.render@3"]')`, "version 3 of invoice.render flagged")
		if row := text(t, ctx, "[data-worker]"); !strings.Contains(row, "payload v1, v2") {
			t.Errorf("worker row %q does not show the accepted payload versions of invoice.render", row)
		}
		screenshot(t, ctx, "workers")
	})

	t.Run("pause stops a queue", func(t *testing.T) {
		stopProducer()
		<-produced
		page(t, ctx, a, "queues", "queues")
		waitJS(t, ctx, `document.querySelector('td[data-queue="export.csv/normal"] [data-col=waiting]')?.textContent === "7"`, "matrix shows export.csv waiting 7")
		click(t, ctx, `button[data-action=pause][data-queue="mail.send/normal"]`)
		confirm(t, ctx, true)
		waitJS(t, ctx, `document.querySelector('td[data-queue="mail.send/normal"]')?.dataset.paused === "true"`, "mail.send shown paused")
		st, err := a.op.QueueStats(tctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range st.Queues {
			if q.Type == "mail.send" && q.Priority == framework.PriorityNormal && !q.Paused {
				t.Fatal("the server does not have the queue paused")
			}
		}
		// A task enqueued now waits: the page shows it waiting and it does not run.
		marker := a.enqueue(t, "mail.send", nil, framework.WithID("after-pause"))
		waitJS(t, ctx, `document.querySelector('[data-paused-queue="mail.send/normal"]') !== null`, "paused list")
		testutil.Wait(t, waitLong, "marker stored and undelivered", func() bool {
			acts, err := a.op.QueueActivity(tctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range acts {
				if q.Type == "mail.send" && q.Priority == framework.PriorityNormal {
					return q.Waiting >= 1 && q.InFlight == 0
				}
			}
			return false
		})
		for len(a.ran) > 0 {
			if id := <-a.ran; id == marker.ID {
				t.Fatal("a task ran on a paused queue")
			}
		}
		waitJS(t, ctx, `Number(document.querySelector('td[data-queue="mail.send/normal"] [data-col=waiting]')?.textContent) >= 1`, "the page shows the task waiting")
		screenshot(t, ctx, "queues")
		click(t, ctx, `button[data-action=resume][data-queue="mail.send/normal"]`)
		waitRan(t, a, marker.ID)
		waitJS(t, ctx, `document.querySelector('td[data-queue="mail.send/normal"]')?.dataset.paused === "false"`, "mail.send shown running")
	})

	t.Run("dead letters", func(t *testing.T) {
		page(t, ctx, a, "dlq", "dlq")
		filterType(t, ctx, "pay.charge")
		waitJS(t, ctx, `document.querySelectorAll("tr[data-seq]").length === 3`, "three dead letters listed")
		if got := text(t, ctx, `tr[data-task=p1] td.err`); got != "permanent: card declined" && !strings.Contains(got, "card declined") {
			t.Errorf("p1 last error %q", got)
		}
		screenshot(t, ctx, "dead-letters")

		seq := text(t, ctx, `tr[data-task=p2] td a`)
		page(t, ctx, a, "dlq/"+seq, "dlq")
		waitJS(t, ctx, `document.getElementById("dlq-payload")?.textContent === '{"cents":1999}'`, "payload shown")
		screenshot(t, ctx, "dead-letter")

		// Replaying a dead letter runs the task.
		a.decline.Store(false)
		page(t, ctx, a, "dlq", "dlq")
		filterType(t, ctx, "pay.charge")
		waitJS(t, ctx, `document.querySelectorAll("tr[data-seq]").length === 3`, "three dead payments listed")
		click(t, ctx, `tr[data-task=p1] button[data-action=replay]`)
		waitRan(t, a, "p1")
		waitJS(t, ctx, `document.querySelectorAll("tr[data-seq]").length === 2`, "two dead letters left")

		// Purge asks first; cancelling keeps the records.
		click(t, ctx, `button[data-action=purge]`)
		confirm(t, ctx, false)
		if n := count(t, ctx, "tr[data-seq]"); n != 2 {
			t.Fatalf("after a cancelled purge %d records", n)
		}
		st, err := a.op.QueueStats(tctx)
		if err != nil || st.Dead["pay.charge"] != 2 {
			t.Fatalf("after a cancelled purge the stream holds %v (%v)", st.Dead, err)
		}
		click(t, ctx, `button[data-action=purge]`)
		confirm(t, ctx, true)
		waitJS(t, ctx, `document.querySelectorAll("tr[data-seq]").length === 0`, "no dead letters left")
		st, err = a.op.QueueStats(tctx)
		if err != nil || st.Dead["pay.charge"] != 0 {
			t.Fatalf("after purge the stream holds %v (%v)", st.Dead, err)
		}
	})

	t.Run("task", func(t *testing.T) {
		page(t, ctx, a, "task/p1", "task")
		waitJS(t, ctx, `document.querySelector('[data-field="State"]')?.textContent === "succeeded"`, "replayed task succeeded")
		screenshot(t, ctx, "task")
	})

	t.Run("malformed link", func(t *testing.T) {
		// A fragment that is not valid percent-encoding still routes (it
		// used to throw before any page rendered, leaving "Loading…").
		page(t, ctx, a, "", "overview")
		if err := chromedp.Do(ctx, chromedp.Navigate(a.web.URL+"/ops/#/task/%E0%A4")); err != nil {
			t.Fatal(err)
		}
		waitJS(t, ctx, `document.getElementById("main").dataset.page === "task"`, "the task page of a malformed link")
	})

	t.Run("scheduled", func(t *testing.T) {
		page(t, ctx, a, "scheduled", "scheduled")
		// The two delayed tasks, soonest first (the version 3 task of the
		// workers test waits as a schedule too, between its hand-backs).
		waitJS(t, ctx, `!!document.querySelector('tr[data-task="later-1"]') && !!document.querySelector('tr[data-task="later-2"]')`, "two delayed tasks")
		order := text(t, ctx, "tbody")
		if i, j := strings.Index(order, "later-1"), strings.Index(order, "later-2"); i > j {
			t.Errorf("later-2 listed before later-1: %q", order)
		}
		screenshot(t, ctx, "scheduled")
	})

	t.Run("cron", func(t *testing.T) {
		page(t, ctx, a, "cron", "cron")
		waitJS(t, ctx, `document.querySelector('tr[data-schedule="nightly-report"]') !== null`, "schedule listed")
		next := text(t, ctx, `tr[data-schedule="nightly-report"] td[data-time]`)
		if !strings.HasPrefix(next, "in ") {
			t.Errorf("next fire %q", next)
		}
		screenshot(t, ctx, "cron")
	})

	t.Run("lanes", func(t *testing.T) {
		for i := range 3 {
			a.enqueue(t, "ledger.post", i, framework.Ordered("acct-hold"))
		}
		page(t, ctx, a, "keys", "keys")
		waitJS(t, ctx, fmt.Sprintf(`(() => { const rows = [...document.querySelectorAll('tr[data-lane^="ledger.post/"]')];
			return rows.length === 2 && rows.some((r) => r.textContent.includes(%q) && r.querySelector(".badge")?.textContent === "running" &&
				r.querySelectorAll("td.num")[0]?.textContent === "1" && r.querySelectorAll("td.num")[1]?.textContent === "2"); })()`, a.workerID),
			"the lane of acct-hold listed with the worker, one running and two queued")
		screenshot(t, ctx, "lanes")
	})

	t.Run("breakers", func(t *testing.T) {
		page(t, ctx, a, "breakers", "breakers")
		waitJS(t, ctx, `document.querySelector('tr[data-dependency="partner"] .badge')?.textContent === "open"`, "partner open")
		screenshot(t, ctx, "breakers")
	})

	t.Run("workflows", func(t *testing.T) {
		page(t, ctx, a, "workflows", "workflows")
		waitJS(t, ctx, `document.querySelectorAll("tr[data-run]").length === 2`, "two runs")
		if got := text(t, ctx, fmt.Sprintf(`tr[data-run=%q] .badge`, okRun)); got != "completed" {
			t.Errorf("run status %q", got)
		}
		screenshot(t, ctx, "workflows")

		page(t, ctx, a, "workflows/"+badRun, "workflows")
		waitJS(t, ctx, `document.querySelectorAll("#dag g[data-step]").length === 4`, "four steps drawn")
		if n := count(t, ctx, "#dag path[data-edge]"); n != 4 {
			t.Errorf("%d edges, want 4", n)
		}
		if st := text(t, ctx, `#dag g[data-step=ship]`); !strings.HasPrefix(st, "shipfailed") {
			t.Errorf("ship node %q", st)
		}
		if n := count(t, ctx, `#dag g[data-state=done]`); n != 3 {
			t.Errorf("%d done steps in the failed run, want 3", n)
		}
		screenshot(t, ctx, "workflow-run")
	})

	t.Run("read-only", func(t *testing.T) {
		for _, p := range []struct{ route, name, ready string }{
			{"queues", "queues", `document.querySelector('td[data-queue="export.csv/normal"]') !== null`},
			{"dlq", "dlq", `document.querySelectorAll("tr[data-seq]").length > 0`},
			{"scheduled", "scheduled", `document.querySelectorAll("tr[data-task]").length > 0`},
		} {
			pageAt(t, ctx, a.web.URL+"/ro/#/"+p.route, p.name)
			waitJS(t, ctx, p.ready, "read-only "+p.route+" rendered")
			if n := count(t, ctx, "main button[data-action]"); n != 0 {
				t.Errorf("read-only %s shows %d action buttons", p.route, n)
			}
		}
		if got := text(t, ctx, "#mode"); got != "read-only" {
			t.Errorf("mode %q", got)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		res, err := http.Get(a.web.URL + "/ops/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var b strings.Builder
		if _, err := fmt.Fprint(&b, mustRead(t, res)); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), `jetflow_queue_waiting{type="export.csv",priority="normal"} 7`) {
			t.Errorf("metrics lack the export.csv backlog:\n%s", b.String())
		}
	})
}

// filterType selects a task type in the dead-letter filter.
func filterType(t *testing.T, ctx context.Context, typ string) {
	t.Helper()
	waitJS(t, ctx, fmt.Sprintf(`(() => {
		const s = document.querySelector("select[name=type]");
		if (!s || ![...s.options].some((o) => o.value === %[1]q)) return false;
		if (s.value !== %[1]q) { s.value = %[1]q; s.dispatchEvent(new Event("change")); }
		return true;
	})()`, typ), "type filter "+typ)
	waitJS(t, ctx, fmt.Sprintf(`[...document.querySelectorAll("tr[data-seq] td[data-col=type]")].every((td) => td.textContent === %q)`, typ), "filtered list")
}

func mustRead(t *testing.T, res *http.Response) string {
	t.Helper()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return sb.String()
}
