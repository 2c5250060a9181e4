package ui_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/ui"
	"github.com/jetflow-io/jetflow/workflow"
)

const waitLong = 20 * time.Second

type env struct {
	srv *testutil.Server
	nc  *nats.Conn
	cl  *framework.Client
	web *httptest.Server
}

func newEnv(t *testing.T, opts ui.Options) *env {
	t.Helper()
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(nc, opts)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", h))
	web := httptest.NewServer(mux)
	t.Cleanup(web.Close)
	return &env{srv: srv, nc: nc, cl: cl, web: web}
}

func (e *env) worker(t *testing.T, register func(w *framework.Worker)) *framework.Worker {
	t.Helper()
	w, err := framework.NewWorker(testutil.Connect(t, e.srv), framework.WithStateTracking(true))
	if err != nil {
		t.Fatal(err)
	}
	register(w)
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
	return w
}

// do sends a request to the mounted dashboard and decodes a JSON answer
// into out (when not nil). It returns the status.
func (e *env) do(t *testing.T, method, path string, body string, mutate bool, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.web.URL+"/ops/"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if mutate {
		req.Header.Set(ui.RequestHeader, "1")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			t.Fatalf("%s %s: %d %q: %v", method, path, res.StatusCode, data, err)
		}
	}
	return res.StatusCode
}

func (e *env) overview(t *testing.T) ui.Overview {
	t.Helper()
	var ov ui.Overview
	if st := e.do(t, "GET", "api/overview", "", false, &ov); st != 200 {
		t.Fatalf("overview: %d", st)
	}
	return ov
}

func queue(t *testing.T, ov ui.Overview, typ, prio string) ui.Queue {
	t.Helper()
	for _, q := range ov.Queues {
		if q.Type == typ && q.Priority == prio {
			return q
		}
	}
	t.Fatalf("no queue %s/%s in %+v", typ, prio, ov.Queues)
	return ui.Queue{}
}

func TestOverviewAndMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	ctx := t.Context()
	release := make(chan struct{})
	var started atomic.Int32
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("mail.send", func(ctx context.Context, task *framework.Task) error {
			started.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil
		}, framework.WithTypeConcurrency(1), framework.WithPrefetch(1))
		w.HandleFunc("pay.charge", func(ctx context.Context, task *framework.Task) error {
			return framework.Permanent(errors.New("card declined"))
		})
	})
	t.Cleanup(func() { close(release) })
	for range 4 {
		if _, err := e.cl.Enqueue(ctx, "mail.send", map[string]string{"to": "a@example.com"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.cl.Enqueue(ctx, "mail.send", nil, framework.In(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cl.Enqueue(ctx, "pay.charge", nil, framework.WithPriority(framework.PriorityCritical)); err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.New(e.cl).Register(ctx, schedule.Definition{Name: "nightly", Spec: "@daily", Type: "mail.send"}); err != nil {
		t.Fatal(err)
	}
	var ov ui.Overview
	// One mail runs and blocks; the worker buffers a few more (its
	// prefetch); the rest wait on the server.
	testutil.Wait(t, waitLong, "one mail running, the rest queued, one dead payment", func() bool {
		ov = e.overview(t)
		q := queue(t, ov, "mail.send", "normal")
		// Delivered and in-flight come from two reads: while the worker
		// pulls its prefetch between them they may differ for a moment.
		return started.Load() == 1 && q.InFlight >= 1 && q.Waiting >= 1 && q.InFlight+int(q.Waiting) == 4 && ov.Dead["pay.charge"] == 1 &&
			q.Delivered == uint64(q.InFlight)
	})
	q := queue(t, ov, "mail.send", "normal")
	if q.Scheduled != 1 || q.Delivered != uint64(q.InFlight) || q.OldestWaitingSeconds <= 0 || q.Paused || q.Consumer == "" {
		t.Errorf("mail queue: %+v", q)
	}
	if ov.Scheduled != 1 || ov.Cron != 1 || ov.DeadTotal != 1 || ov.Paused != 0 {
		t.Errorf("totals: %+v", ov)
	}

	// The metrics say the same, in the text format.
	res, err := http.Get(e.web.URL + "/ops/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain; version=0.0.4") {
		t.Errorf("content type %q", ct)
	}
	samples := parseMetrics(t, res.Body)
	want := map[string]float64{
		`jetflow_inspect_up`: 1,
		`jetflow_queue_waiting{type="mail.send",priority="normal"}`:      float64(q.Waiting),
		`jetflow_queue_pending_acks{type="mail.send",priority="normal"}`: float64(q.InFlight),
		`jetflow_queue_scheduled{type="mail.send",priority="normal"}`:    1,
		`jetflow_queue_paused{type="mail.send",priority="normal"}`:       0,
		`jetflow_dead_letters{type="pay.charge"}`:                        1,
		`jetflow_scheduled_tasks`:                                        1,
		`jetflow_cron_schedules`:                                         1,
	}
	for k, v := range want {
		if got, ok := samples[k]; !ok || got != v {
			t.Errorf("%s = %v (present %v), want %v", k, got, ok, v)
		}
	}
	if age := samples[`jetflow_queue_oldest_waiting_age_seconds{type="mail.send",priority="normal"}`]; age <= 0 {
		t.Errorf("oldest age %v", age)
	}
}

// parseMetrics reads the text format strictly enough to catch malformed
// lines: every sample follows its family's HELP and TYPE lines.
func parseMetrics(t *testing.T, r io.Reader) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	typed := map[string]bool{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "# TYPE ") {
			f := strings.Fields(line)
			if len(f) != 4 || (f[3] != "gauge" && f[3] != "counter") {
				t.Errorf("bad TYPE line %q", line)
			}
			typed[f[2]] = true
			continue
		}
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("bad sample %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("bad value in %q", line)
		}
		name := line[:i]
		if j := strings.IndexByte(name, '{'); j >= 0 {
			if !typed[name[:j]] {
				t.Errorf("sample before its TYPE: %q", line)
			}
		} else if !typed[name] {
			t.Errorf("sample before its TYPE: %q", line)
		}
		out[name] = v
	}
	return out
}

func TestMutationsAreGuarded(t *testing.T) {
	t.Parallel()
	ro := newEnv(t, ui.Options{ReadOnly: true})
	var out map[string]any
	if st := ro.do(t, "POST", "api/dlq/purge", `{"all":true}`, true, &out); st != http.StatusForbidden {
		t.Errorf("read-only purge: %d %v", st, out)
	}
	rw := newEnv(t, ui.Options{})
	if st := rw.do(t, "POST", "api/dlq/purge", `{"all":true}`, false, &out); st != http.StatusForbidden {
		t.Errorf("purge without the request header: %d %v", st, out)
	}
	if st := rw.do(t, "POST", "api/dlq/purge", `{}`, true, &out); st != http.StatusBadRequest {
		t.Errorf("purge with an empty filter and no all: %d %v", st, out)
	}
	if st := rw.do(t, "POST", "api/dlq/purge", `{"all":true}`, true, &out); st != http.StatusOK || out["purged"] != float64(0) {
		t.Errorf("purge all: %d %v", st, out)
	}
	if st := rw.do(t, "POST", "api/queues/Bad%20Type/normal/pause", ``, true, &out); st != http.StatusBadRequest {
		t.Errorf("pause with a bad type: %d %v", st, out)
	}
	if st := rw.do(t, "POST", "api/queues/a.b/urgent/pause", ``, true, &out); st != http.StatusBadRequest {
		t.Errorf("pause with a bad priority: %d %v", st, out)
	}
	if st := rw.do(t, "POST", "api/queues/a.b/normal/pause", ``, true, &out); st != http.StatusNotFound {
		t.Errorf("pause a queue nobody serves: %d %v", st, out)
	}
	if st := rw.do(t, "GET", "api/tasks/unknown", ``, false, &out); st != http.StatusNotFound {
		t.Errorf("unknown task: %d %v", st, out)
	}
	if st := rw.do(t, "GET", "api/nothing", ``, false, &out); st != http.StatusNotFound {
		t.Errorf("unknown endpoint: %d %v", st, out)
	}
	// The page itself, and the redirect to the trailing slash.
	res, err := http.Get(rw.web.URL + "/ops")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.Contains(string(body), `<script src="app.js">`) || res.Request.URL.Path != "/ops/" {
		t.Errorf("index: %d at %s", res.StatusCode, res.Request.URL.Path)
	}
}

func TestDeadLetterReplayAndPause(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	ctx := t.Context()
	var fail atomic.Bool
	fail.Store(true)
	ran := make(chan string, 8)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("pay.charge", func(ctx context.Context, task *framework.Task) error {
			if fail.Load() {
				return framework.Permanent(errors.New("card declined"))
			}
			ran <- task.ID
			return nil
		})
	})
	if _, err := e.cl.Enqueue(ctx, "pay.charge", map[string]int{"cents": 500}, framework.WithID("p1")); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Items []ui.DeadLetter `json:"items"`
	}
	testutil.Wait(t, waitLong, "dead letter listed", func() bool {
		e.do(t, "GET", "api/dlq?type=pay.charge", "", false, &list)
		return len(list.Items) == 1
	})
	d := list.Items[0]
	if d.TaskID != "p1" || d.Reason != "permanent" || !strings.Contains(d.LastError, "card declined") {
		t.Errorf("dead letter %+v", d)
	}
	var full ui.DeadLetter
	if st := e.do(t, "GET", "api/dlq/"+strconv.FormatUint(d.Seq, 10), "", false, &full); st != 200 || full.Payload != `{"cents":500}` {
		t.Errorf("dead letter detail %d: %+v", st, full)
	}
	// Pause the queue, replay: the task waits until the queue resumes.
	if st := e.do(t, "POST", "api/queues/pay.charge/normal/pause", "", true, nil); st != 200 {
		t.Fatalf("pause: %d", st)
	}
	fail.Store(false)
	var rep map[string]any
	if st := e.do(t, "POST", "api/dlq/"+strconv.FormatUint(d.Seq, 10)+"/replay", "", true, &rep); st != 200 || rep["task_id"] != "p1" {
		t.Fatalf("replay: %d %v", st, rep)
	}
	testutil.Wait(t, waitLong, "replayed task waiting on the paused queue", func() bool {
		q := queue(t, e.overview(t), "pay.charge", "normal")
		return q.Paused && q.Waiting == 1
	})
	select {
	case id := <-ran:
		t.Fatalf("task %s ran on a paused queue", id)
	default:
	}
	if st := e.do(t, "POST", "api/queues/pay.charge/normal/resume", "", true, nil); st != 200 {
		t.Fatalf("resume: %d", st)
	}
	if id := testutil.Recv(t, ran, waitLong, "replayed task runs after resume"); id != "p1" {
		t.Errorf("ran %s", id)
	}
	if st := e.do(t, "GET", "api/dlq/"+strconv.FormatUint(d.Seq, 10), "", false, nil); st != http.StatusNotFound {
		t.Errorf("replayed record still there: %d", st)
	}
}

func TestScheduledCronAndWorkflows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	ctx := t.Context()
	info, err := e.cl.Enqueue(ctx, "report.build", nil, framework.In(time.Hour), framework.WithID("r1"))
	if err != nil {
		t.Fatal(err)
	}
	var sched struct {
		Tasks []framework.TaskRecord `json:"tasks"`
	}
	if st := e.do(t, "GET", "api/scheduled", "", false, &sched); st != 200 || len(sched.Tasks) != 1 ||
		sched.Tasks[0].ID != "r1" || !sched.Tasks[0].ScheduledFor.Equal(info.ScheduledFor) {
		t.Fatalf("scheduled: %d %+v", st, sched)
	}
	if st := e.do(t, "POST", "api/tasks/r1/cancel", "", true, nil); st != 200 {
		t.Fatalf("cancel: %d", st)
	}
	if e.do(t, "GET", "api/scheduled", "", false, &sched); len(sched.Tasks) != 0 {
		t.Errorf("cancelled task still scheduled: %+v", sched.Tasks)
	}

	if _, err := schedule.New(e.cl).Register(ctx, schedule.Definition{Name: "hourly", Spec: "0 0 * * * *", Type: "report.build"}); err != nil {
		t.Fatal(err)
	}
	var cron struct {
		Schedules []ui.Schedule `json:"schedules"`
	}
	if e.do(t, "GET", "api/cron", "", false, &cron); len(cron.Schedules) != 1 || cron.Schedules[0].Next.Minute() != 0 ||
		!cron.Schedules[0].Next.After(time.Now()) {
		t.Errorf("cron: %+v", cron)
	}

	d := workflow.New("order")
	workflow.Step(d, "reserve", func(ctx context.Context, in int) (int, error) { return in, nil })
	workflow.Step(d, "charge", func(ctx context.Context, in int) (int, error) { return in, nil }, workflow.After("reserve"))
	wc, err := workflow.NewClient(e.cl, d)
	if err != nil {
		t.Fatal(err)
	}
	e.worker(t, func(w *framework.Worker) { workflow.Register(w, d) })
	id, err := wc.Start(ctx, "order", 3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := wc.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	var runs struct {
		Runs []ui.RunSummary `json:"runs"`
	}
	if e.do(t, "GET", "api/workflows", "", false, &runs); len(runs.Runs) != 1 || runs.Runs[0].Status != "completed" || runs.Runs[0].States["done"] != 2 {
		t.Errorf("runs: %+v", runs)
	}
	var run workflow.Run
	if st := e.do(t, "GET", "api/workflows/"+id, "", false, &run); st != 200 || len(run.Steps) != 2 || run.Step("charge").After[0] != "reserve" {
		t.Errorf("run %d: %+v", st, run)
	}
}

func TestBreakersAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, ui.Options{})
	ctx := t.Context()
	e.worker(t, func(w *framework.Worker) {
		if _, err := breaker.Install(w); err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("api.call", func(ctx context.Context, task *framework.Task) error {
			return breaker.Call(ctx, "partner", func(context.Context) error { return errors.New("503") })
		}, breaker.WithDependencies("partner"), framework.WithMaxAttempts(1))
	})
	for range breaker.DefaultConsecutiveFailures {
		if _, err := e.cl.Enqueue(ctx, "api.call", nil); err != nil {
			t.Fatal(err)
		}
	}
	var out struct {
		Breakers []ui.Breaker `json:"breakers"`
	}
	testutil.Wait(t, waitLong, "breaker open", func() bool {
		e.do(t, "GET", "api/breakers", "", false, &out)
		return len(out.Breakers) == 1 && out.Breakers[0].State == "open"
	})
	if b := out.Breakers[0]; b.Dependency != "partner" || len(b.TaskTypes) != 1 || b.TaskTypes[0] != "api.call" {
		t.Errorf("breaker %+v", b)
	}
	res, err := http.Get(e.web.URL + "/ops/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	m := parseMetrics(t, res.Body)
	if m[`jetflow_breaker_state{dependency="partner",state="open"}`] != 1 || m[`jetflow_breaker_state{dependency="partner",state="closed"}`] != 0 {
		t.Errorf("breaker metrics: %v", m)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	if _, err := ui.New(nil, ui.Options{}); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("nil conn: %v", err)
	}
	srv := testutil.RunServer(t)
	nc := testutil.Connect(t, srv)
	if _, err := ui.New(nc, ui.Options{RefreshInterval: time.Millisecond}); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("tiny refresh: %v", err)
	}
	if _, err := ui.New(nc, ui.Options{Prefix: "Bad Prefix"}); err == nil {
		t.Error("bad prefix accepted")
	}
}
