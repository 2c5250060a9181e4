package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
	"github.com/jetflow-io/jetflow/workflow"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const waitLong = 20 * time.Second

// env is one listening embedded server with the topology ensured.
type env struct {
	srv *testutil.Server
	url string
	nc  *nats.Conn
	cl  *framework.Client
}

func newEnv(t *testing.T, opts ...testutil.ServerOption) *env {
	t.Helper()
	te := testutil.NewEnv(t, streams.Config{}, append([]testutil.ServerOption{testutil.WithListen()}, opts...)...)
	return newClientEnv(t, te.Server, te.Conn)
}

func newClientEnv(t *testing.T, srv *testutil.Server, nc *nats.Conn) *env {
	t.Helper()
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, url: srv.ClientURL(), nc: nc, cl: cl}
}

// newAuthEnv is newEnv on a server that requires credentials, which the
// test's own connection passes with connOpts.
func newAuthEnv(t *testing.T, opts []testutil.ServerOption, connOpts []nats.Option) *env {
	t.Helper()
	srv := testutil.RunServer(t, append([]testutil.ServerOption{testutil.WithListen()}, opts...)...)
	nc := testutil.Connect(t, srv, connOpts...)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	return newClientEnv(t, srv, nc)
}

// worker starts a worker on its own connection with the handlers reg
// registers, and stops it at cleanup.
func (e *env) worker(t *testing.T, reg func(w *framework.Worker), opts ...framework.WorkerOption) {
	t.Helper()
	w, err := framework.NewWorker(testutil.Connect(t, e.srv), opts...)
	if err != nil {
		t.Fatal(err)
	}
	reg(w)
	testutil.StartWorker(t, w)
}

// result is one run of the command line.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the command in-process against e's server.
func (e *env) cli(t *testing.T, args ...string) result {
	t.Helper()
	return runCLI(t, append([]string{"-s", e.url}, args...)...)
}

func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(t.Context(), args, &out, &errOut)
	return result{out.String(), errOut.String(), code}
}

// ok runs the command, expects exit 0 and decodes its JSON output into v.
func (e *env) ok(t *testing.T, v any, args ...string) result {
	t.Helper()
	r := e.cli(t, args...)
	if r.code != exitOK {
		t.Fatalf("jetflow %v: exit %d\nstdout:\n%s\nstderr:\n%s", args, r.code, r.stdout, r.stderr)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
			t.Fatalf("jetflow %v: output is not the expected JSON: %v\n%s", args, err, r.stdout)
		}
	}
	return r
}

// fails runs the command and expects exit code with stderr matching re.
func (e *env) fails(t *testing.T, code int, re string, args ...string) {
	t.Helper()
	r := e.cli(t, args...)
	if r.code != code || !regexp.MustCompile(re).MatchString(r.stderr) {
		t.Fatalf("jetflow %v: exit %d, stderr %q; want exit %d and stderr matching %s", args, r.code, r.stderr, code, re)
	}
}

type queueJSON struct {
	Type, Priority, Consumer string
	Waiting                  uint64
	Scheduled, Running       int
	Retrying                 int
	Dead                     uint64
	Paused, Stranded         bool
	Pulls                    int
	OldestWaiting            time.Time `json:"oldest_waiting"`
	Leader                   string
	ReplicasCurrent          bool `json:"replicas_current"`
}

type statusJSON struct {
	Queues    []queueJSON
	Dead      map[string]uint64
	DeadTotal uint64 `json:"dead_total"`
	Scheduled int
	Cron      int
	Streams   []struct {
		Name, Cluster, Leader string
		Replicas              []struct {
			Name    string
			Current bool
		}
	}
}

func (s statusJSON) queue(typ, prio string) *queueJSON {
	for i := range s.Queues {
		if s.Queues[i].Type == typ && s.Queues[i].Priority == prio {
			return &s.Queues[i]
		}
	}
	return nil
}

func compact(t *testing.T, raw json.RawMessage) string {
	t.Helper()
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("payload %q: %v", raw, err)
	}
	return b.String()
}

type charge struct {
	Order string `json:"order"`
}

// TestAcceptance follows the acceptance flow on quickstart-like
// tasks: status counts, a declined payment in the dead-letter stream and
// replayed, a delayed task listed with its type and due time, and a cron
// schedule with its next fire time.
func TestAcceptance(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()
	charged := make(chan string, 16)
	e.worker(t, func(w *framework.Worker) {
		framework.Handle(w, "payments.charge", func(ctx context.Context, tk *framework.Task, c charge) error {
			charged <- c.Order
			if c.Order == "ord-1004" {
				return framework.Permanent(errors.New("gateway: card declined"))
			}
			return nil
		}, framework.WithServedPriorities(framework.PriorityCritical))
		w.HandleFunc("emails.send", func(context.Context, *framework.Task) error { return nil },
			framework.WithServedPriorities(framework.PriorityLow))
	})
	for _, o := range []string{"ord-1001", "ord-1004"} {
		if _, err := e.cl.Enqueue(ctx, "payments.charge", charge{o}, framework.WithPriority(framework.PriorityCritical)); err != nil {
			t.Fatal(err)
		}
	}
	later, err := e.cl.Enqueue(ctx, "reports.build", map[string]string{"name": "revenue"}, framework.In(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := schedule.New(e.cl).Register(ctx, schedule.Definition{Name: "nightly", Spec: "0 0 2 * * *", TimeZone: "Europe/Paris", Type: "reports.build"}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		testutil.Recv(t, charged, waitLong, "payment")
	}

	var st statusJSON
	testutil.Wait(t, waitLong, "the declined payment dead-lettered and acknowledged", func() bool {
		e.ok(t, &st, "status", "--json")
		// The dead letter is stored before the task is acknowledged: wait
		// for both, or the table below may still show it running.
		pay := st.queue("payments.charge", "critical")
		return st.Dead["payments.charge"] == 1 && pay != nil && pay.Running == 0
	})
	pay := st.queue("payments.charge", "critical")
	if pay == nil || pay.Consumer == "" || pay.Waiting != 0 || pay.Dead != 1 || pay.Stranded {
		t.Fatalf("payments queue: %+v", pay)
	}
	if em := st.queue("emails.send", "low"); em == nil || em.Consumer == "" {
		t.Fatalf("emails queue: %+v", em)
	}
	if rep := st.queue("reports.build", "normal"); rep == nil || rep.Scheduled != 1 || rep.Stranded {
		t.Fatalf("reports queue: %+v", rep)
	}
	if st.Scheduled != 1 || st.Cron != 1 || st.DeadTotal != 1 {
		t.Fatalf("totals: %+v", st)
	}
	table := e.ok(t, nil, "status").stdout
	if !regexp.MustCompile(`(?m)^payments\.charge\s+critical\s+0\s+0\s+0\s+0\s+-\s+1\s+-\s+\d+`).MatchString(table) {
		t.Errorf("status table:\n%s", table)
	}
	// --type keeps one type's rows; its dead letters show once, not on
	// each priority's row.
	table = e.ok(t, nil, "status", "--type", "payments.charge").stdout
	rows := regexp.MustCompile(`(?m)^\S+\s+(critical|high|normal|low)\s.*$`).FindAllString(table, -1)
	deadRows := 0
	for _, row := range rows {
		if !strings.HasPrefix(row, "payments.charge ") {
			t.Errorf("status --type payments.charge shows %q", row)
		}
		if regexp.MustCompile(`^\S+\s+\S+(\s+\d+){4}\s+\S+\s+1\s`).MatchString(row) {
			deadRows++
		}
	}
	if len(rows) == 0 || deadRows != 1 {
		t.Errorf("status --type payments.charge: %d rows, the dead letter counted on %d of them (want once):\n%s", len(rows), deadRows, table)
	}

	var dl struct {
		DeadLetters []struct {
			Seq       uint64
			Type      string
			Reason    string
			LastError string `json:"last_error"`
		} `json:"dead_letters"`
	}
	e.ok(t, &dl, "dlq", "ls", "--json")
	if len(dl.DeadLetters) != 1 || dl.DeadLetters[0].Type != "payments.charge" || dl.DeadLetters[0].Reason != "permanent" ||
		!strings.Contains(dl.DeadLetters[0].LastError, "card declined") {
		t.Fatalf("dead letters: %+v", dl)
	}
	var got struct{ Payload charge }
	e.ok(t, &got, "dlq", "get", fmt.Sprint(dl.DeadLetters[0].Seq), "--json")
	if got.Payload.Order != "ord-1004" {
		t.Fatalf("dead letter payload %+v", got)
	}
	r := e.ok(t, nil, "dlq", "replay", fmt.Sprint(dl.DeadLetters[0].Seq))
	if !strings.Contains(r.stdout, "replayed") {
		t.Fatalf("replay said %q", r.stdout)
	}
	if o := testutil.Recv(t, charged, waitLong, "the replayed payment"); o != "ord-1004" {
		t.Fatalf("replay ran %s", o)
	}

	var sched []struct {
		ID, Type, Priority, State string
		DueAt                     time.Time `json:"due_at"`
	}
	e.ok(t, &sched, "tasks", "ls", "--state", "scheduled", "--json")
	if len(sched) != 1 || sched[0].ID != later.ID || sched[0].Type != "reports.build" || sched[0].State != "scheduled" ||
		!sched[0].DueAt.Equal(later.ScheduledFor) {
		t.Fatalf("scheduled tasks: %+v, want %s due %v", sched, later.ID, later.ScheduledFor)
	}

	var crons []struct {
		Name, Spec, Type string
		TimeZone         string    `json:"time_zone"`
		NextFire         time.Time `json:"next_fire"`
	}
	e.ok(t, &crons, "cron", "ls", "--json")
	paris, err := time.LoadLocation("Europe/Paris")
	if err != nil {
		t.Skip("no time zone database")
	}
	if len(crons) != 1 || crons[0].Name != "nightly" || crons[0].TimeZone != "Europe/Paris" || !crons[0].NextFire.After(time.Now()) ||
		crons[0].NextFire.In(paris).Hour() != 2 || time.Until(crons[0].NextFire) > 25*time.Hour {
		t.Fatalf("cron: %+v", crons)
	}
	if out := e.ok(t, nil, "cron", "ls").stdout; !strings.Contains(out, "nightly") || !strings.Contains(out, "Europe/Paris") {
		t.Errorf("cron table:\n%s", out)
	}
	e.ok(t, nil, "cron", "rm", "nightly")
	e.fails(t, exitFailed, `not found`, "cron", "rm", "nightly")
}

// TestTasksCommands enqueues from the command line and reads the tasks back.
func TestTasksCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var enq struct {
		ID    string
		DueAt time.Time `json:"due_at"`
	}
	e.ok(t, &enq, "enqueue", "reports.build", `{"name":"q3"}`, "--in", "1h", "--id", "rep-q3", "--json")
	if enq.ID != "rep-q3" || time.Until(enq.DueAt) < 59*time.Minute {
		t.Fatalf("enqueue: %+v", enq)
	}
	var task struct {
		ID, Type, State string
		DueAt           time.Time       `json:"due_at"`
		Payload         json.RawMessage `json:"payload"`
	}
	e.ok(t, &task, "tasks", "get", "rep-q3", "--json")
	if task.State != "scheduled" || task.Type != "reports.build" || compact(t, task.Payload) != `{"name":"q3"}` || !task.DueAt.Equal(enq.DueAt) {
		t.Fatalf("get: %+v", task)
	}
	e.ok(t, nil, "tasks", "cancel", "rep-q3")
	e.fails(t, exitFailed, `not found`, "tasks", "get", "rep-q3")
	e.fails(t, exitFailed, `not found`, "tasks", "cancel", "rep-q3")

	e.ok(t, nil, "enqueue", "emails.send", `"hi"`, "--priority", "high", "--header", "Tenant=acme")
	e.ok(t, nil, "enqueue", "emails.send", `"other"`)
	var waiting []struct{ ID, Priority, State string }
	e.ok(t, &waiting, "tasks", "ls", "--priority", "high", "--json")
	if len(waiting) != 1 || waiting[0].Priority != "high" || waiting[0].State != "pending" {
		t.Fatalf("waiting high: %+v", waiting)
	}
	var detail struct {
		Headers map[string][]string
		Payload json.RawMessage
	}
	e.ok(t, &detail, "tasks", "get", waiting[0].ID, "--json")
	if compact(t, detail.Payload) != `"hi"` || detail.Headers["Tenant"][0] != "acme" {
		t.Fatalf("detail: %+v", detail)
	}
	// Nobody serves emails.send: the status flags it.
	var st statusJSON
	e.ok(t, &st, "status", "--json")
	if q := st.queue("emails.send", "high"); q == nil || !q.Stranded || q.Waiting != 1 || q.OldestWaiting.IsZero() {
		t.Fatalf("stranded queue: %+v", q)
	}
	if out := e.ok(t, nil, "status").stdout; !strings.Contains(out, "STRANDED") {
		t.Errorf("status does not flag the stranded queue:\n%s", out)
	}
	if out := e.ok(t, nil, "tasks", "ls").stdout; !regexp.MustCompile(`(?m)emails\.send\s+high\s+waiting`).MatchString(out) {
		t.Errorf("tasks table:\n%s", out)
	}

	e.fails(t, exitUsage, `not valid JSON`, "enqueue", "emails.send", "not json")
	e.fails(t, exitUsage, `exclude each other`, "enqueue", "emails.send", "1", "--in", "1m", "--at", "2030-01-01T00:00:00Z")
	e.fails(t, exitUsage, `--state`, "tasks", "ls", "--state", "done")
	e.fails(t, exitFailed, `invalid task type`, "enqueue", "Bad Type", "1")
}

// TestRetryingTask lists a task that failed once and waits for its retry.
func TestRetryingTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("sync.crm", func(context.Context, *framework.Task) error {
			return framework.RetryAfterErr(time.Hour, errors.New("crm: 503"))
		})
	})
	e.ok(t, nil, "enqueue", "sync.crm", `{}`, "--id", "crm-1")
	var tasks []struct {
		ID, State string
		Attempt   int
		LastError string `json:"last_error"`
	}
	testutil.Wait(t, waitLong, "the task retrying", func() bool {
		e.ok(t, &tasks, "tasks", "ls", "--state", "retrying", "--json")
		return len(tasks) == 1
	})
	if tasks[0].ID != "crm-1" || tasks[0].State != "retrying" || tasks[0].Attempt != 1 || !strings.Contains(tasks[0].LastError, "crm: 503") {
		t.Fatalf("retrying: %+v", tasks)
	}
	var st statusJSON
	e.ok(t, &st, "status", "--json")
	if q := st.queue("sync.crm", "normal"); q == nil || q.Running != 1 {
		t.Fatalf("queue: %+v", q)
	}
}

// TestDLQCommands filters, purges with confirmation and progress, and
// replays in bulk.
func TestDLQCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ran := make(chan string, 64)
	e.worker(t, func(w *framework.Worker) {
		for _, typ := range []string{"a.task", "b.task"} {
			w.HandleFunc(typ, func(ctx context.Context, tk *framework.Task) error {
				ran <- tk.Type + ":" + string(tk.Payload)
				return framework.Permanent(fmt.Errorf("%s broke on %s", typ, tk.Payload))
			})
		}
	})
	for i := range 3 {
		e.ok(t, nil, "enqueue", "a.task", fmt.Sprint(i))
	}
	e.ok(t, nil, "enqueue", "b.task", `"x"`)
	for range 4 {
		testutil.Recv(t, ran, waitLong, "a failing task")
	}
	type page struct {
		DeadLetters []struct{ Seq uint64 } `json:"dead_letters"`
		Next        uint64
	}
	var p page
	testutil.Wait(t, waitLong, "four dead letters", func() bool {
		e.ok(t, &p, "dlq", "ls", "--json")
		return len(p.DeadLetters) == 4
	})
	e.ok(t, &p, "dlq", "ls", "--type", "a.task", "--limit", "2", "--json")
	if len(p.DeadLetters) != 2 || p.Next == 0 {
		t.Fatalf("first page: %+v", p)
	}
	e.ok(t, &p, "dlq", "ls", "--type", "a.task", "--after", fmt.Sprint(p.Next), "--json")
	if len(p.DeadLetters) != 1 {
		t.Fatalf("second page: %+v", p)
	}
	// The next-page hint keeps the filters: pasted, it lists the rest of
	// a.task's records only.
	r := e.ok(t, nil, "dlq", "ls", "--type", "a.task", "--error", "broke on", "--since", "1h", "--limit", "1")
	hint := regexp.MustCompile(`(?m)^more: jetflow (dlq ls .*)$`).FindStringSubmatch(r.stdout)
	if hint == nil || !strings.Contains(hint[1], "--type a.task") || !strings.Contains(hint[1], "--error 'broke on'") ||
		!regexp.MustCompile(`--since \d{4}-\d\d-\d\dT`).MatchString(hint[1]) {
		t.Fatalf("next-page hint drops filters: %q", r.stdout)
	}
	// Looked up by task ID: dlq ls --task, and tasks get of a dead task.
	var one struct {
		DeadLetters []struct {
			Seq    uint64
			TaskID string `json:"task_id"`
			Type   string
		} `json:"dead_letters"`
	}
	e.ok(t, &one, "dlq", "ls", "--json")
	victim := one.DeadLetters[1]
	e.ok(t, &one, "dlq", "ls", "--task", victim.TaskID, "--json")
	if len(one.DeadLetters) != 1 || one.DeadLetters[0].Seq != victim.Seq {
		t.Fatalf("dlq ls --task %s: %+v, want seq %d only", victim.TaskID, one.DeadLetters, victim.Seq)
	}
	r = e.ok(t, nil, "tasks", "get", victim.TaskID)
	if !strings.Contains(r.stdout, fmt.Sprintf("jetflow dlq get %d", victim.Seq)) {
		t.Fatalf("tasks get of a dead-lettered task does not point to its record %d:\n%s", victim.Seq, r.stdout)
	}
	e.ok(t, &p, "dlq", "ls", "--error", "ON 1", "--json")
	if len(p.DeadLetters) != 1 {
		t.Fatalf("by error: %+v", p)
	}
	e.fails(t, exitUsage, `--reason`, "dlq", "ls", "--reason", "bored")

	// A dry run succeeds and deletes nothing.
	if r := e.ok(t, nil, "dlq", "purge", "--error", "on 1"); !regexp.MustCompile(`would delete 1 dead letter.*--yes`).MatchString(r.stdout) {
		t.Fatalf("dry run: %q", r.stdout)
	}
	r = e.ok(t, nil, "dlq", "purge", "--error", "on 1", "--yes")
	if !strings.Contains(r.stdout, "purged 1") || !regexp.MustCompile(`(?m)^\[#+\] examined 4/4$`).MatchString(r.stderr) {
		t.Fatalf("purge: stdout %q stderr %q", r.stdout, r.stderr)
	}
	var purged struct{ Purged int }
	e.ok(t, &purged, "dlq", "purge", "--type", "b.task", "--yes", "--json")
	if purged.Purged != 1 {
		t.Fatalf("purge b: %+v", purged)
	}
	var replayed struct{ Replayed int }
	r = e.ok(t, &replayed, "dlq", "replay", "--all", "--type", "a.task", "--json")
	if replayed.Replayed != 2 || !strings.Contains(r.stderr, "examined 2/2") {
		t.Fatalf("replay all: %+v, stderr %q", replayed, r.stderr)
	}
	for range 2 {
		if got := testutil.Recv(t, ran, waitLong, "a replayed task"); !strings.HasPrefix(got, "a.task:") {
			t.Fatalf("replayed %s", got)
		}
	}
	e.fails(t, exitUsage, `sequences, or --all`, "dlq", "replay")
	e.fails(t, exitUsage, `not a record sequence`, "dlq", "get", "x")
	e.fails(t, exitFailed, `not found`, "dlq", "get", "999")
}

// TestPauseResumeCommands pauses a priority before any worker, checks that
// the worker leaves its task alone, and resumes it.
func TestPauseResumeCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.fails(t, exitFailed, `no consumer serves`, "pause", "emails.send")
	e.ok(t, nil, "pause", "emails.send", "--priority", "low")
	ran := make(chan string, 4)
	e.worker(t, func(w *framework.Worker) {
		w.HandleFunc("emails.send", func(ctx context.Context, tk *framework.Task) error {
			ran <- string(tk.Payload)
			return nil
		}, framework.WithServedPriorities(framework.PriorityLow))
	})
	e.ok(t, nil, "enqueue", "emails.send", `"hello"`, "--priority", "low")
	var st statusJSON
	testutil.Wait(t, waitLong, "the task waiting on a paused queue with a worker pulling", func() bool {
		e.ok(t, &st, "status", "--json")
		q := st.queue("emails.send", "low")
		return q != nil && q.Paused && q.Waiting == 1 && q.Pulls > 0
	})
	select {
	case p := <-ran:
		t.Fatalf("task %s ran while paused", p)
	default:
	}
	if out := e.ok(t, nil, "status").stdout; !regexp.MustCompile(`(?m)^emails\.send\s+low\s+1\s+0\s+0\s+0\s+\S+\s+0\s+yes`).MatchString(out) {
		t.Errorf("status table:\n%s", out)
	}
	var res struct{ Resumed []string }
	e.ok(t, &res, "resume", "emails.send", "--json")
	if len(res.Resumed) != 1 {
		t.Fatalf("resume: %+v", res)
	}
	if got := testutil.Recv(t, ran, waitLong, "task after resume"); got != `"hello"` {
		t.Fatalf("ran %s", got)
	}
	var pz struct {
		Paused []string
		Until  time.Time
	}
	e.ok(t, &pz, "pause", "emails.send", "--for", "1h", "--json")
	if len(pz.Paused) != 1 || time.Until(pz.Until) < 59*time.Minute {
		t.Fatalf("pause for: %+v", pz)
	}
	e.ok(t, &st, "status", "--json")
	if q := st.queue("emails.send", "low"); q == nil || !q.Paused {
		t.Fatalf("queue: %+v", q)
	}
}

// TestBreakersCommand shows an open breaker a worker reported.
func TestBreakersCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var bs []struct {
		Dependency, State string
		TaskTypes         []string `json:"task_types"`
	}
	e.ok(t, &bs, "breakers", "--json")
	if len(bs) != 0 {
		t.Fatalf("breakers before any worker: %+v", bs)
	}
	e.worker(t, func(w *framework.Worker) {
		if _, err := breaker.Install(w, breaker.WithSettings("gateway", breaker.Settings{ConsecutiveFailures: 1, OpenTimeout: time.Hour})); err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("payments.charge", func(ctx context.Context, tk *framework.Task) error {
			return breaker.Call(ctx, "gateway", func(context.Context) error { return errors.New("503") })
		}, breaker.WithDependencies("gateway"))
	})
	e.ok(t, nil, "enqueue", "payments.charge", "{}")
	testutil.Wait(t, waitLong, "an open breaker", func() bool {
		e.ok(t, &bs, "breakers", "--json")
		return len(bs) == 1 && bs[0].State == "open"
	})
	if bs[0].Dependency != "gateway" || len(bs[0].TaskTypes) != 1 {
		t.Fatalf("breaker: %+v", bs)
	}
	if out := e.ok(t, nil, "breakers").stdout; !regexp.MustCompile(`(?m)^gateway\s+open`).MatchString(out) {
		t.Errorf("breakers table:\n%s", out)
	}
	// The open breaker paused the type's consumer: status says so.
	var st statusJSON
	testutil.Wait(t, waitLong, "the queue paused by the breaker", func() bool {
		e.ok(t, &st, "status", "--json")
		q := st.queue("payments.charge", "normal")
		return q != nil && q.Paused
	})
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs a long-running command until the returned stop is called.
func start(t *testing.T, args ...string) (out *syncBuffer, stop func() result) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	out = &syncBuffer{}
	errOut := &syncBuffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, out, errOut) }()
	var once sync.Once
	var res result
	stop = func() result {
		once.Do(func() {
			cancel()
			select {
			case code := <-done:
				res = result{out.String(), errOut.String(), code}
			case <-time.After(waitLong):
				t.Errorf("jetflow %v did not stop", args)
			}
		})
		return res
	}
	t.Cleanup(func() { stop() })
	return out, stop
}

// TestStatusWatch refreshes until interrupted, one JSON document per line.
func TestStatusWatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	out, stop := start(t, "-s", e.url, "status", "--watch", "--interval", "100ms", "--json")
	enqueued := false
	testutil.Wait(t, waitLong, "a change seen by --watch", func() bool {
		if !enqueued && strings.Count(out.String(), "\n") >= 1 {
			// A task after the first refresh: a later one must show it.
			if _, err := e.cl.Enqueue(t.Context(), "x.y", 1); err != nil {
				t.Fatal(err)
			}
			enqueued = true
		}
		return strings.Contains(out.String(), `"type":"x.y"`)
	})
	r := stop()
	if r.code != exitOK {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if !json.Valid([]byte(l)) {
			t.Fatalf("not one JSON document per line: %q", l)
		}
	}
}

// TestDevCommand starts the embedded server, which a client then uses.
func TestDevCommand(t *testing.T) {
	t.Parallel()
	store := filepath.Join(t.TempDir(), "store")
	out, stop := start(t, "dev", "--port", "-1", "--store", store, "--no-ui")
	var url string
	testutil.Wait(t, waitLong, "the dev server's URL", func() bool {
		m := regexp.MustCompile(`export NATS_URL=(\S+)`).FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	r := runCLI(t, "-s", url, "enqueue", "emails.send", `"hi"`)
	if r.code != exitOK {
		t.Fatalf("enqueue on dev server: %d %s", r.code, r.stderr)
	}
	if r := stop(); r.code != exitOK {
		t.Fatalf("dev exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(store, "jetstream")); err != nil {
		t.Fatalf("no file store in %s: %v", store, err)
	}
}

// TestConnection covers the connection flags: a nats CLI context, NATS_URL,
// user and password, and the errors that say what to do.
func TestConnection(t *testing.T) {
	e := newAuthEnv(t, []testutil.ServerOption{func(o *server.Options) { o.Username, o.Password = "ops", "s3cret" }},
		[]nats.Option{nats.UserInfo("ops", "s3cret")})
	// Without credentials the server refuses.
	r := e.cli(t, "status")
	if r.code != exitConnect || !strings.Contains(r.stderr, "refused the credentials") {
		t.Fatalf("no credentials: exit %d %q", r.code, r.stderr)
	}
	if r := e.cli(t, "status", "--user", "ops", "--password", "s3cret"); r.code != exitOK {
		t.Fatalf("user/password: exit %d %q", r.code, r.stderr)
	}
	// A nats CLI context carries the URL and the credentials.
	cfg := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", cfg)
	dir := filepath.Join(cfg, "nats", "context")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ctxJSON := fmt.Sprintf(`{"description":"test","url":%q,"user":"ops","password":"s3cret","color_scheme":""}`, e.url)
	if err := os.WriteFile(filepath.Join(dir, "ops.json"), []byte(ctxJSON), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "--context", "ops", "status"); r.code != exitOK {
		t.Fatalf("context: exit %d %q", r.code, r.stderr)
	}
	t.Setenv("NATS_CONTEXT", "ops")
	if r := runCLI(t, "status"); r.code != exitOK {
		t.Fatalf("NATS_CONTEXT: exit %d %q", r.code, r.stderr)
	}
	t.Setenv("NATS_CONTEXT", "")
	if r := runCLI(t, "status", "--context", "missing"); r.code != exitFailed || !strings.Contains(r.stderr, "nats context ls") {
		t.Fatalf("missing context: exit %d %q", r.code, r.stderr)
	}
	t.Setenv("NATS_URL", e.url)
	if r := runCLI(t, "status", "--user", "ops", "--password", "s3cret"); r.code != exitOK {
		t.Fatalf("NATS_URL: exit %d %q", r.code, r.stderr)
	}
	// A stopped server: exit 3 and a hint.
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
	r = runCLI(t, "status", "--user", "ops", "--password", "s3cret")
	if r.code != exitConnect || !strings.Contains(r.stderr, "is the server running?") || !strings.Contains(r.stderr, "NATS_URL") {
		t.Fatalf("stopped server: exit %d %q", r.code, r.stderr)
	}
}

// TestUsage checks help, unknown commands and the topology hint.
func TestUsage(t *testing.T) {
	t.Parallel()
	if r := runCLI(t, "help"); r.code != exitOK || !strings.Contains(r.stdout, "dlq replay") {
		t.Fatalf("help: %d %q", r.code, r.stdout)
	}
	if r := runCLI(t, "help", "tasks", "ls"); r.code != exitOK || !strings.Contains(r.stdout, "--state") {
		t.Fatalf("help tasks ls: %d %q", r.code, r.stdout)
	}
	if r := runCLI(t, "tasks", "ls", "-h"); r.code != exitOK || !strings.Contains(r.stdout, "--priority") {
		t.Fatalf("tasks ls -h: %d %q", r.code, r.stdout)
	}
	// A group's help lists its commands with their flags.
	for _, args := range [][]string{{"help", "tasks"}, {"tasks", "--help"}, {"help", "dlq"}} {
		group := args[0]
		if group == "help" {
			group = args[1]
		}
		r := runCLI(t, args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage: jetflow "+group+" ") {
			t.Fatalf("%v: %d %q", args, r.code, r.stdout)
		}
		if !strings.Contains(r.stdout, "--limit") {
			t.Fatalf("%v does not list the group's flags: %q", args, r.stdout)
		}
	}
	if r := runCLI(t, "help", "frobnicate"); r.code != exitUsage || !strings.Contains(r.stderr, "unknown command") {
		t.Fatalf("help of an unknown command: %d %q", r.code, r.stderr)
	}
	if r := runCLI(t); r.code != exitUsage {
		t.Fatalf("no command: %d", r.code)
	}
	if r := runCLI(t, "frobnicate"); r.code != exitUsage || !strings.Contains(r.stderr, "unknown command") {
		t.Fatalf("unknown: %d %q", r.code, r.stderr)
	}
	if r := runCLI(t, "status", "--bogus"); r.code != exitUsage {
		t.Fatalf("bad flag: %d", r.code)
	}
	e := newEnv(t)
	e.fails(t, exitFailed, `pass the right --prefix`, "status", "--prefix", "other")
	e.fails(t, exitUsage, `--prefix`, "status", "--prefix", "Bad Prefix")
}

// TestWorkflowsCommands lists runs and shows one with its steps.
func TestWorkflowsCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	def := workflow.New("order")
	workflow.Step(def, "reserve", func(ctx context.Context, in string) (string, error) { return in + "-reserved", nil })
	workflow.Step(def, "charge", func(ctx context.Context, in string) (string, error) {
		return "", framework.Permanent(errors.New("card declined"))
	}, workflow.After("reserve"))
	e.worker(t, func(w *framework.Worker) { workflow.Register(w, def) })
	wc, err := workflow.NewClient(e.cl, def)
	if err != nil {
		t.Fatal(err)
	}
	id, err := wc.Start(t.Context(), "order", "o-1", workflow.WithRunID("run-1"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	if _, err := wc.Wait(ctx, id); err != nil {
		t.Fatal(err)
	}
	var runs []struct{ ID, Workflow, Status string }
	e.ok(t, &runs, "workflows", "ls", "--json")
	if len(runs) != 1 || runs[0].ID != "run-1" || runs[0].Status != "failed" {
		t.Fatalf("runs: %+v", runs)
	}
	e.ok(t, &runs, "workflows", "ls", "--status", "completed", "--json")
	if len(runs) != 0 {
		t.Fatalf("completed runs: %+v", runs)
	}
	var run struct {
		Status string
		Steps  []struct {
			Name, State string
			After       []string
		}
	}
	e.ok(t, &run, "workflows", "get", "run-1", "--json")
	if len(run.Steps) != 2 || run.Steps[0].Name != "reserve" || run.Steps[0].State != "done" ||
		run.Steps[1].State != "failed" || run.Steps[1].After[0] != "reserve" {
		t.Fatalf("run: %+v", run)
	}
	out := e.ok(t, nil, "workflows", "get", "run-1").stdout
	if !regexp.MustCompile(`(?m)^charge\s+reserve\s+failed`).MatchString(out) {
		t.Errorf("run table:\n%s", out)
	}
	e.fails(t, exitFailed, `run not found`, "workflows", "get", "nope")
	e.fails(t, exitUsage, `--status`, "workflows", "ls", "--status", "odd")
}

// TestStatusCluster reads stream and consumer leaders and replica currency
// on a three-node cluster, then stops a node that follows the task stream
// and sees its replica reported behind or offline.
func TestStatusCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	c := testutil.RunCluster(t, 3)
	_, js := c.JetStream(t)
	ctx, cancel := context.WithTimeout(t.Context(), waitLong)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	if _, err := topology.EnsureConsumer(ctx, js, streams.MustNames(""), topology.ConsumerSpec{TaskType: "emails.send"}); err != nil {
		t.Fatal(err)
	}
	url := c.URL()
	var st statusJSON
	testutil.Wait(t, waitLong, "every replica current", func() bool {
		r := runCLI(t, "-s", url, "status", "--json")
		if r.code != exitOK {
			return false
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatal(err)
		}
		q := st.queue("emails.send", "normal")
		if q == nil || q.Leader == "" || !q.ReplicasCurrent || len(st.Streams) < 1 {
			return false
		}
		s := st.Streams[0]
		return s.Cluster != "" && s.Leader != "" && len(s.Replicas) == 2 && s.Replicas[0].Current && s.Replicas[1].Current
	})
	if out := runCLI(t, "-s", url, "status").stdout; !regexp.MustCompile(`(?m)^JETFLOW_TASKS\s+0\s+\S+\s+\S+ current, \S+ current$`).MatchString(out) {
		t.Errorf("status table:\n%s", out)
	}
	// Stop a follower of the task stream.
	leader := c.StreamLeader(t, "JETFLOW_TASKS")
	follower := (leader + 1) % 3
	name := c.Server(follower).Name()
	c.StopNode(follower)
	testutil.Wait(t, waitLong, "the stopped replica reported", func() bool {
		r := runCLI(t, "-s", url, "status", "--json")
		if r.code != exitOK {
			return false
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil {
			t.Fatal(err)
		}
		for _, rep := range st.Streams[0].Replicas {
			if rep.Name == name && !rep.Current {
				return true
			}
		}
		return false
	})
	if out := runCLI(t, "-s", url, "status").stdout; !strings.Contains(out, name+" OFFLINE") && !strings.Contains(out, name+" BEHIND") {
		t.Errorf("status table does not flag %s:\n%s", name, out)
	}
}
