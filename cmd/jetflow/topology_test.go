package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// upgradeJSON is the JSON of jetflow upgrade.
type upgradeJSON struct {
	Found bool
	Plan  *struct {
		UpToDate bool `json:"up_to_date"`
		Missing  []string
		Change   []struct{ Resource, Field, Have, Want string }
		Drift    []struct{ Resource, Field, Fix string }
		Weaker   []struct{ Resource, Field, Fix string }
	}
	Report *struct {
		Created  []string
		Migrated []struct{ Resource, Field, Have, Want string }
		Drift    []struct{ Resource, Field, Fix string }
	}
}

func wantLines(t *testing.T, what, out string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(out, l) {
			t.Errorf("%s does not say %q:\n%s", what, l, out)
		}
	}
}

// TestUpgradeCommandMigratesThePreviousRelease runs status and upgrade on
// the topology of the previous release: status names each difference and
// the command, upgrade --dry-run changes nothing, upgrade migrates and
// says what, a second upgrade changes nothing, and a drift upgrade cannot
// fix fails it with the commands that do.
func TestUpgradeCommandMigratesThePreviousRelease(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	nc, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	// As the previous release left it (streams' TestUpgradeFromPreviousRelease
	// builds it from nothing).
	s, err := js.Stream(ctx, "JETFLOW_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	old := s.CachedInfo().Config
	old.Discard, old.AllowAtomicPublish, old.AllowMsgTTL = jetstream.DiscardOld, true, true
	if _, err := js.UpdateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteConsumer(ctx, "JETFLOW_DELAYS", "mover"); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "JETFLOW_WORKERS"); err != nil {
		t.Fatal(err)
	}
	e := newClientEnv(t, srv, nc)

	r := e.ok(t, nil, "status")
	wantLines(t, "status", r.stdout,
		"TOPOLOGY differs from this jetflow's: 4 to create or migrate, 1 weaker",
		"missing   JETFLOW_DELAYS/mover", "missing   JETFLOW_WORKERS",
		"migrate   JETFLOW_TASKS Discard: DiscardOld -> DiscardNew",
		"migrate   JETFLOW_TASKS AllowAtomicPublish: true -> false",
		"run `jetflow upgrade`",
		"weaker    JETFLOW_TASKS: AllowMsgTTL is true", "to tighten it: take the JETFLOW_SCHEDULES source off it")
	var st struct {
		Topology struct {
			Plan struct {
				UpToDate bool `json:"up_to_date"`
				Change   []struct{ Resource, Field string }
			}
			Run string
		}
	}
	e.ok(t, &st, "status", "--json")
	if st.Topology.Plan.UpToDate || len(st.Topology.Plan.Change) != 2 || st.Topology.Run != "jetflow upgrade" {
		t.Errorf("status --json topology %+v; want two migrations and the upgrade command", st.Topology)
	}

	var dry upgradeJSON
	e.ok(t, &dry, "upgrade", "--dry-run", "--json")
	if dry.Plan == nil || dry.Report != nil || len(dry.Plan.Change) != 2 || len(dry.Plan.Missing) != 2 || len(dry.Plan.Weaker) != 1 || !dry.Found {
		t.Fatalf("upgrade --dry-run --json: %+v", dry.Plan)
	}
	if c := streamInfo(t, ctx, js, "JETFLOW_TASKS"); c.Discard != jetstream.DiscardOld {
		t.Fatal("upgrade --dry-run changed the task stream")
	}

	r = e.ok(t, nil, "upgrade")
	wantLines(t, "upgrade", r.stdout,
		"created   JETFLOW_DELAYS/mover", "created   JETFLOW_WORKERS",
		"migrated  JETFLOW_TASKS Discard: DiscardOld -> DiscardNew",
		"migrated  JETFLOW_TASKS AllowAtomicPublish: true -> false",
		"weaker    JETFLOW_TASKS: AllowMsgTTL is true")
	if c := streamInfo(t, ctx, js, "JETFLOW_TASKS"); c.Discard != jetstream.DiscardNew || c.AllowAtomicPublish {
		t.Fatalf("task stream after upgrade: discard %v, atomic publish %v", c.Discard, c.AllowAtomicPublish)
	}
	var again upgradeJSON
	e.ok(t, &again, "upgrade", "--json")
	if again.Report == nil || len(again.Report.Created)+len(again.Report.Migrated)+len(again.Report.Drift) != 0 {
		t.Fatalf("second upgrade: %+v; want no change", again.Report)
	}
	r = e.ok(t, nil, "status")
	wantLines(t, "status after the upgrade", r.stdout, "TOPOLOGY differs from this jetflow's: 1 weaker")
	if strings.Contains(r.stdout, "run `jetflow upgrade`") {
		t.Errorf("status after the upgrade still asks for it:\n%s", r.stdout)
	}

	// A push consumer under the movers' name: not in place.
	if err := js.DeleteConsumer(ctx, "JETFLOW_DELAYS", "mover"); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreatePushConsumer(ctx, "JETFLOW_DELAYS", jetstream.ConsumerConfig{Durable: "mover", DeliverSubject: "somewhere"}); err != nil {
		t.Fatal(err)
	}
	r = e.cli(t, "upgrade")
	if r.code != exitFailed || !strings.Contains(r.stderr, "cannot be changed in place") {
		t.Fatalf("upgrade with drift: exit %d, stderr %q; want exit 1 saying it cannot", r.code, r.stderr)
	}
	wantLines(t, "upgrade with drift", r.stdout, "DRIFT     JETFLOW_DELAYS/mover: DeliverSubject", "fix: `nats consumer rm JETFLOW_DELAYS mover`, then `jetflow upgrade`")
	r = e.ok(t, nil, "status")
	wantLines(t, "status with drift", r.stdout, "1 DRIFT", "nats consumer rm JETFLOW_DELAYS mover")
	// The fix it gives.
	if err := js.DeleteConsumer(ctx, "JETFLOW_DELAYS", "mover"); err != nil {
		t.Fatal(err)
	}
	e.ok(t, nil, "upgrade")
	if r = e.ok(t, nil, "status"); strings.Contains(r.stdout, "DRIFT") {
		t.Errorf("status after the fix:\n%s", r.stdout)
	}
}

// TestUpgradeCommandCreatesADeployment: on a server without jetflow,
// upgrade --dry-run lists everything as missing, upgrade creates it with
// --replicas, and status is then up to date.
func TestUpgradeCommandCreatesADeployment(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	nc, js := testutil.JetStream(t, srv)
	e := newClientEnv(t, srv, nc)

	var dry upgradeJSON
	e.ok(t, &dry, "upgrade", "--dry-run", "--json")
	if dry.Found || dry.Plan == nil || len(dry.Plan.Missing) != 16 || dry.Plan.UpToDate {
		t.Fatalf("upgrade --dry-run on an empty server: %+v", dry.Plan)
	}
	if names := js.StreamNames(t.Context()); names.Err() == nil {
		for n := range names.Name() {
			t.Errorf("upgrade --dry-run created stream %s", n)
		}
	}
	e.fails(t, exitUsage, "--replicas 6", "upgrade", "--replicas", "6")
	e.fails(t, exitUsage, "excludes", "upgrade", "--dry-run", "--migrate-task-stream")
	r := e.ok(t, nil, "upgrade", "--replicas", "1")
	wantLines(t, "upgrade", r.stdout, "no deployment yet", "created   JETFLOW_TASKS", "created   JETFLOW_WORKERS", "up to date")
	r = e.ok(t, nil, "status")
	wantLines(t, "status", r.stdout, "TOPOLOGY up to date")
	r = e.ok(t, nil, "upgrade", "--dry-run")
	wantLines(t, "upgrade --dry-run", r.stdout, "up to date: nothing to create or migrate")
}

func streamInfo(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	return s.CachedInfo().Config
}

// TestUpgradeCommandMovesRunDocuments: on the layout before the run
// stream, upgrade takes the run subjects away from the task stream and
// fails saying the documents left there need --migrate-run-documents,
// which moves them; then nothing is left to do.
func TestUpgradeCommandMovesRunDocuments(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	nc, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "JETFLOW_RUNS"); err != nil {
		t.Fatal(err)
	}
	tasks := streamInfo(t, ctx, js, "JETFLOW_TASKS")
	tasks.Subjects = append(tasks.Subjects, "jetflow.wf.>")
	if _, err := js.UpdateStream(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	for _, run := range []string{"r1", "r2"} {
		if _, err := js.Publish(ctx, "jetflow.wf."+run, []byte(`{"id":"`+run+`","status":"running"}`)); err != nil {
			t.Fatal(err)
		}
	}
	e := newClientEnv(t, srv, nc)
	r := e.ok(t, nil, "upgrade", "--dry-run")
	wantLines(t, "upgrade --dry-run", r.stdout, "missing   JETFLOW_RUNS", "migrate   JETFLOW_TASKS Subjects:",
		"DRIFT     JETFLOW_TASKS: run documents is 2 run(s) on jetflow.wf.>", "jetflow upgrade --migrate-run-documents")

	r = e.cli(t, "upgrade")
	if r.code != exitFailed || !strings.Contains(r.stderr, "left after the upgrade") ||
		!strings.Contains(r.stdout, "created   JETFLOW_RUNS") || !strings.Contains(r.stdout, "jetflow upgrade --migrate-run-documents") {
		t.Fatalf("upgrade with run documents in the task stream: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = e.ok(t, nil, "upgrade", "--migrate-run-documents")
	wantLines(t, "upgrade --migrate-run-documents", r.stdout, "moved     2 workflow run document(s)", "up to date")
	r = e.ok(t, nil, "upgrade", "--dry-run")
	wantLines(t, "upgrade --dry-run after the migration", r.stdout, "up to date: nothing to create or migrate")
}

// TestUpgradeCommandMigratesTheTaskStream: on the layout before the
// schedule stream, upgrade fails naming --migrate-task-stream, which
// recreates the task stream with its tasks; then nothing is left to do.
func TestUpgradeCommandMigratesTheTaskStream(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t, testutil.WithListen())
	nc, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cfgs, err := streams.StreamConfigs(streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tasks := cfgs[0]
	tasks.AllowMsgSchedules, tasks.AllowRollup, tasks.DenyPurge, tasks.Sources = true, true, false, nil
	tasks.Discard, tasks.AllowMsgTTL = jetstream.DiscardOld, true
	tasks.Subjects = append(tasks.Subjects, "jetflow.sched.>", "jetflow.cron.>", "jetflow.wf.>")
	if _, err := js.CreateStream(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "jetflow.task.normal.emails.send", []byte("{}"), jetstream.WithMsgID("before-1")); err != nil {
		t.Fatal(err)
	}
	e := newClientEnv(t, srv, nc)

	r := e.cli(t, "upgrade")
	if r.code != exitFailed || !strings.Contains(r.stdout, "DRIFT     JETFLOW_TASKS: AllowMsgSchedules is true") ||
		!strings.Contains(r.stdout, "jetflow upgrade --migrate-task-stream") {
		t.Fatalf("upgrade on the layout before the schedule stream: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	r = e.ok(t, nil, "upgrade", "--migrate-task-stream")
	wantLines(t, "upgrade --migrate-task-stream", r.stdout, "migrated the task stream: 1 message(s) copied, 1 restored", "up to date")
	r = e.ok(t, nil, "upgrade", "--dry-run")
	wantLines(t, "upgrade --dry-run after the migration", r.stdout, "up to date: nothing to create or migrate")
	s, err := js.Stream(ctx, "JETFLOW_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.GetLastMsgForSubject(ctx, "jetflow.task.normal.emails.send"); err != nil || m.Header.Get("Nats-Msg-Id") != "before-1" {
		t.Fatalf("the task after the migration: %v, %v", m, err)
	}
}
