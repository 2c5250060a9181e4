package streams_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// previousTopology creates by hand, with no call to Ensure, the topology
// of the previous release (commit 97b8596, before issue 38): the task
// stream discarding its oldest tasks when full and allowing message TTL
// and atomic batches, no movers' consumer (each worker's mover created
// its own), no worker registry bucket; and, from the release before it,
// the sourcing consumer at the server's default MaxAckPending.
func previousTopology(t *testing.T, ctx context.Context, js jetstream.JetStream) {
	t.Helper()
	cfgs, err := streams.StreamConfigs(streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cfgs {
		if c.Name == "JETFLOW_TASKS" {
			c.Discard, c.AllowMsgTTL, c.AllowAtomicPublish = jetstream.DiscardOld, true, true
		}
		if _, err := js.CreateStream(ctx, c); err != nil {
			t.Fatalf("create %s: %v", c.Name, err)
		}
	}
	fired, err := streams.FiredConsumerConfig(streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fired.MaxAckPending = 1000
	if _, err := js.CreatePushConsumer(ctx, "JETFLOW_SCHEDULES", fired); err != nil {
		t.Fatal(err)
	}
	buckets, err := streams.BucketConfigs(streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range buckets {
		if b.Bucket == "JETFLOW_WORKERS" {
			continue
		}
		if _, err := js.CreateKeyValue(ctx, b); err != nil {
			t.Fatalf("create bucket %s: %v", b.Bucket, err)
		}
	}
}

// fields returns "resource field have->want" for each drift, sorted.
func fields(ds []streams.Drift) []string {
	out := make([]string, 0, len(ds))
	for _, d := range ds {
		out = append(out, d.Resource+" "+d.Field+" "+d.Have+"->"+d.Want)
	}
	slices.Sort(out)
	return out
}

// TestUpgradeFromPreviousRelease builds the previous release's topology by
// hand, enqueues tasks into it, and checks that Check names every
// difference without changing anything, that Ensure migrates what it
// reported and says so, that a second Ensure changes nothing and Check is
// then clean, and that the tasks stored before the upgrade run after it.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	previousTopology(t, ctx, js)

	// Tasks of the previous deployment: immediate ones in the task
	// stream, delayed ones in the delay stream (no mover ran yet), one due
	// after the upgrade.
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	const immediate, delayed = 20, 3
	for i := range immediate {
		if _, err := cl.Enqueue(ctx, "upgrade.task", []byte(fmt.Sprint(i)), framework.WithID(fmt.Sprintf("now-%d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range delayed {
		if _, err := cl.Enqueue(ctx, "upgrade.task", []byte("later"), framework.WithID(fmt.Sprintf("later-%d", i)), framework.In(time.Duration(i)*time.Second)); err != nil {
			t.Fatal(err)
		}
	}

	wantChange := []string{
		"JETFLOW_SCHEDULES/tasks MaxAckPending 1000->20000",
		"JETFLOW_TASKS AllowAtomicPublish true->false",
		"JETFLOW_TASKS Discard DiscardOld->DiscardNew",
	}
	plan, err := streams.Check(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fields(plan.Change); !slices.Equal(got, wantChange) {
		t.Errorf("Check's changes:\n %s\nwant\n %s", strings.Join(got, "\n "), strings.Join(wantChange, "\n "))
	}
	if got := sorted(plan.Create); !slices.Equal(got, []string{"JETFLOW_DELAYS/mover", "JETFLOW_WORKERS"}) {
		t.Errorf("Check's missing resources %v; want the movers' consumer and the worker registry", got)
	}
	if len(plan.Drift) != 0 {
		t.Errorf("Check's drift %+v; want none", plan.Drift)
	}
	if len(plan.Weaker) != 1 || plan.Weaker[0].Resource != "JETFLOW_TASKS" || plan.Weaker[0].Field != "AllowMsgTTL" ||
		!strings.Contains(plan.Weaker[0].Fix, "nats stream rm JETFLOW_TASKS") {
		t.Errorf("Check's weaker %+v; want the task stream's AllowMsgTTL with the commands that recreate it", plan.Weaker)
	}
	if plan.UpToDate() || !plan.NeedsEnsure() {
		t.Errorf("UpToDate %v, NeedsEnsure %v; want false, true", plan.UpToDate(), plan.NeedsEnsure())
	}
	// Check changed nothing.
	if c := streamConfig(t, ctx, js, "JETFLOW_TASKS"); c.Discard != jetstream.DiscardOld || !c.AllowAtomicPublish {
		t.Errorf("task stream after Check: discard %v, atomic %v; Check changed it", c.Discard, c.AllowAtomicPublish)
	}
	if _, err := js.Consumer(ctx, "JETFLOW_DELAYS", "mover"); err == nil {
		t.Error("the movers' consumer exists after Check; Check created it")
	}
	if _, err := js.KeyValue(ctx, "JETFLOW_WORKERS"); err == nil {
		t.Error("the worker registry exists after Check; Check created it")
	}

	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fields(rep.Changed); !slices.Equal(got, wantChange) {
		t.Errorf("Ensure's migrations:\n %s\nwant\n %s", strings.Join(got, "\n "), strings.Join(wantChange, "\n "))
	}
	if !slices.Equal(rep.Created, []string{"JETFLOW_DELAYS/mover"}) || !slices.Equal(rep.BucketsCreated, []string{"JETFLOW_WORKERS"}) {
		t.Errorf("Ensure created %v and buckets %v; want the movers' consumer and the worker registry", rep.Created, rep.BucketsCreated)
	}
	if len(rep.Weaker) != 1 || rep.Weaker[0].Fix == "" {
		t.Errorf("Ensure's weaker %+v; want the task stream's AllowMsgTTL with its fix", rep.Weaker)
	}

	for i := range 2 {
		plan, err := streams.Check(ctx, js, streams.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if plan.NeedsEnsure() || len(plan.Drift) != 0 || len(plan.Weaker) != 1 {
			t.Errorf("Check after Ensure %d: %+v; want nothing but the task stream's AllowMsgTTL", i+1, plan)
		}
		rep, err := streams.Ensure(ctx, js, streams.Config{})
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Created)+len(rep.Updated)+len(rep.Changed)+len(rep.BucketsCreated)+len(rep.Drift) != 0 {
			t.Errorf("Ensure run again (%d): %+v; want no change", i+2, rep)
		}
	}

	// A worker of this version runs every task stored before the upgrade.
	var mu sync.Mutex
	ran := map[string]int{}
	w, err := framework.NewWorker(testutil.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	w.HandleFunc("upgrade.task", func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		ran[task.ID]++
		mu.Unlock()
		return nil
	})
	testutil.StartWorker(t, w)
	testutil.Wait(t, 30*time.Second, "every task stored before the upgrade to run", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == immediate+delayed
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range ran {
		if n != 1 || !(strings.HasPrefix(id, "now-") || strings.HasPrefix(id, "later-")) {
			t.Errorf("task %s ran %d times", id, n)
		}
	}
}

// TestCheckTheLayoutBeforeTheScheduleStream checks that Check reports a
// task stream holding schedules (the layout before decision 012) as drift
// whose fix is the migration command, without creating the streams that
// MigrateTaskStream creates.
func TestCheckTheLayoutBeforeTheScheduleStream(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
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
	plan, err := streams.Check(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Drift) != 1 || plan.Drift[0].Field != "AllowMsgSchedules" || !strings.Contains(plan.Drift[0].Fix, "jetflow upgrade --migrate-task-stream") {
		t.Fatalf("Check's drift %+v; want the task stream's AllowMsgSchedules fixed by jetflow upgrade --migrate-task-stream", plan.Drift)
	}
	if slices.Contains(plan.Create, "JETFLOW_SCHEDULES") || slices.Contains(plan.Create, "JETFLOW_RUNS") {
		t.Errorf("Check would create %v; the migration creates the schedule and run streams", plan.Create)
	}
	if _, err := js.Stream(ctx, "JETFLOW_DLQ"); err == nil {
		t.Error("Check created the dead-letter stream")
	}
}

// TestDeployedConfigKeepsTheDeploymentsSettings checks that Ensure with
// DeployedConfig changes no setting an operator chose.
func TestDeployedConfigKeepsTheDeploymentsSettings(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if c, found, err := streams.DeployedConfig(ctx, js, ""); err != nil || found || c.Prefix != "" {
		t.Fatalf("DeployedConfig without a deployment: %+v, %v, %v; want the defaults, not found", c, found, err)
	}
	chosen := streams.Config{Storage: jetstream.MemoryStorage, DuplicateWindow: 5 * time.Minute, MaxTaskBytes: 1 << 20,
		DLQMaxAge: 48 * time.Hour, AdvisoryMaxAge: time.Hour, AllowTaskPurge: true}
	if _, err := streams.Ensure(ctx, js, chosen); err != nil {
		t.Fatal(err)
	}
	c, found, err := streams.DeployedConfig(ctx, js, "")
	if err != nil || !found {
		t.Fatalf("DeployedConfig: %v, found %v", err, found)
	}
	chosen.Replicas, chosen.Partitions = 1, 1
	if !reflect.DeepEqual(c, chosen) {
		t.Errorf("DeployedConfig %+v; want %+v", c, chosen)
	}
	plan, err := streams.Check(ctx, js, c)
	if err != nil || !plan.UpToDate() {
		t.Errorf("Check with DeployedConfig: %+v, %v; want up to date", plan, err)
	}
	if _, _, err := streams.DeployedConfig(ctx, js, "Bad Prefix"); err == nil {
		t.Error("DeployedConfig accepted an invalid prefix")
	}
}
