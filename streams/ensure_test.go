package streams_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func jsContext(t *testing.T) (context.Context, jetstream.JetStream) {
	t.Helper()
	srv := testutil.RunServer(t)
	_, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx, js
}

func streamConfig(t *testing.T, ctx context.Context, js jetstream.JetStream, name string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatalf("stream %s: %v", name, err)
	}
	return s.CachedInfo().Config
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func TestEnsureIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	all := []string{"JETFLOW_ADVISORIES", "JETFLOW_DELAYS", "JETFLOW_DELAYS/mover", "JETFLOW_DLQ", "JETFLOW_RUNS", "JETFLOW_SCHEDULES", "JETFLOW_SCHEDULES/tasks", "JETFLOW_TASKS"}

	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sorted(rep.Created), all) || len(rep.Updated)+len(rep.Unchanged)+len(rep.Drift) != 0 {
		t.Fatalf("first Ensure: %+v", rep)
	}
	tasks := streamConfig(t, ctx, js, "JETFLOW_TASKS")
	if tasks.Retention != jetstream.WorkQueuePolicy || tasks.AllowMsgSchedules || tasks.AllowRollup || !tasks.DenyPurge || tasks.AllowAtomicPublish ||
		tasks.AllowMsgTTL || tasks.Discard != jetstream.DiscardNew ||
		tasks.Duplicates != streams.DefaultDuplicateWindow || tasks.Replicas != 1 {
		t.Errorf("task stream config %+v", tasks)
	}
	// Producers publish delayed tasks here: no schedules, no rollups.
	if d := streamConfig(t, ctx, js, "JETFLOW_DELAYS"); d.Retention != jetstream.WorkQueuePolicy || d.AllowMsgSchedules || d.AllowRollup ||
		!slices.Equal(d.Subjects, []string{"jetflow.delay.>"}) || !d.AllowDirect {
		t.Errorf("delay stream config %+v", d)
	}
	if slices.Contains(tasks.Subjects, "jetflow.wf.>") {
		t.Errorf("task stream still holds the run subjects: %v", tasks.Subjects)
	}
	if runs := streamConfig(t, ctx, js, "JETFLOW_RUNS"); runs.MaxMsgsPerSubject != 1 || runs.AllowRollup || !runs.AllowMsgTTL ||
		!slices.Equal(runs.Subjects, []string{"jetflow.wf.>"}) {
		t.Errorf("run stream config %+v", runs)
	}
	if dlq := streamConfig(t, ctx, js, "JETFLOW_DLQ"); dlq.Retention != jetstream.LimitsPolicy || dlq.MaxAge != streams.DefaultDLQMaxAge {
		t.Errorf("DLQ config %+v", dlq)
	}

	rep, err = streams.Ensure(ctx, js, streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(sorted(rep.Unchanged), all) || len(rep.Created)+len(rep.Updated)+len(rep.Drift) != 0 {
		t.Fatalf("second Ensure: %+v", rep)
	}
}

func TestEnsureUpdatesDuplicateWindowAndKeepsForeignFields(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	// An operator caps the DLQ by message count: Ensure does not manage
	// that field and must keep it.
	dlq := streamConfig(t, ctx, js, "JETFLOW_DLQ")
	dlq.MaxMsgs = 1000
	if _, err := js.UpdateStream(ctx, dlq); err != nil {
		t.Fatal(err)
	}

	rep, err := streams.Ensure(ctx, js, streams.Config{DuplicateWindow: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"JETFLOW_DELAYS", "JETFLOW_DLQ", "JETFLOW_SCHEDULES", "JETFLOW_TASKS"}; !slices.Equal(sorted(rep.Updated), want) {
		t.Fatalf("Updated %v, want %v (report %+v)", rep.Updated, want, rep)
	}
	if d := streamConfig(t, ctx, js, "JETFLOW_TASKS").Duplicates; d != time.Minute {
		t.Errorf("task stream Duplicates = %v, want 1m", d)
	}
	if m := streamConfig(t, ctx, js, "JETFLOW_DLQ").MaxMsgs; m != 1000 {
		t.Errorf("operator's DLQ MaxMsgs = %d after Ensure, want kept at 1000", m)
	}
	rep, err = streams.Ensure(ctx, js, streams.Config{DuplicateWindow: time.Minute})
	if err != nil || len(rep.Unchanged) != 8 {
		t.Fatalf("Ensure again: %+v, %v", rep, err)
	}
}

// A task stream of the previous layout holds the workflow run subjects:
// Ensure takes them away from it and gives them to the run stream.
func TestEnsureMovesRunSubjectsToTheRunStream(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteStream(ctx, "JETFLOW_RUNS"); err != nil {
		t.Fatal(err)
	}
	tasks := streamConfig(t, ctx, js, "JETFLOW_TASKS")
	tasks.Subjects = append(tasks.Subjects, "jetflow.wf.>")
	tasks.AllowMsgTTL = true // as that layout had it
	if _, err := js.UpdateStream(ctx, tasks); err != nil {
		t.Fatal(err)
	}
	// Run documents of that layout: two revisions of r1 (the last final,
	// with a TTL) and one of r2.
	for _, m := range []*nats.Msg{
		{Subject: "jetflow.wf.r1", Data: []byte(`{"id":"r1","status":"running"}`)},
		{Subject: "jetflow.wf.r1", Data: []byte(`{"id":"r1","status":"completed"}`), Header: nats.Header{jetstream.MsgTTLHeader: {"3600"}}},
		{Subject: "jetflow.wf.r2", Data: []byte(`{"id":"r2","status":"running"}`)},
	} {
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := topology.MigrateRunDocuments(ctx, js, streams.Config{}); err == nil {
		t.Fatal("MigrateRunDocuments before Ensure: no error")
	}
	// The message TTL that layout allowed on the task stream cannot be
	// turned off: reported as weaker (decision 040), and everything else is
	// done.
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil || len(rep.Weaker) != 1 || rep.Weaker[0].Field != "AllowMsgTTL" {
		t.Fatalf("Ensure on the previous layout: %v, weaker %+v; want the task stream's AllowMsgTTL as weaker", err, rep.Weaker)
	}
	if !slices.Equal(rep.Updated, []string{"JETFLOW_TASKS"}) || !slices.Equal(rep.Created, []string{"JETFLOW_RUNS"}) {
		t.Fatalf("Ensure on the previous layout: %+v", rep)
	}
	if subj := streamConfig(t, ctx, js, "JETFLOW_TASKS").Subjects; slices.Contains(subj, "jetflow.wf.>") {
		t.Errorf("task stream subjects %v", subj)
	}
	n, err := topology.MigrateRunDocuments(ctx, js, streams.Config{})
	if err != nil || n != 2 {
		t.Fatalf("MigrateRunDocuments = %d, %v; want 2", n, err)
	}
	runs, err := js.Stream(ctx, "JETFLOW_RUNS")
	if err != nil {
		t.Fatal(err)
	}
	r1, err := runs.GetLastMsgForSubject(ctx, "jetflow.wf.r1")
	if err != nil || !strings.Contains(string(r1.Data), "completed") || r1.Header.Get(jetstream.MsgTTLHeader) != "3600" {
		t.Fatalf("r1 in the run stream: %v, %v", r1, err)
	}
	if info, err := js.Stream(ctx, "JETFLOW_TASKS"); err != nil || info.CachedInfo().State.Msgs != 0 {
		t.Fatalf("task stream after the migration: %v", err)
	}
	if n, err := topology.MigrateRunDocuments(ctx, js, streams.Config{}); err != nil || n != 0 {
		t.Fatalf("second migration = %d, %v; want 0", n, err)
	}
}

func TestEnsureReportsDrift(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	// Someone created the task stream by hand, with the wrong retention.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      "JETFLOW_TASKS",
		Subjects:  []string{"jetflow.task.>"},
		Retention: jetstream.LimitsPolicy,
		Storage:   jetstream.MemoryStorage,
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	var de *streams.DriftError
	if !errors.As(err, &de) || !errors.Is(err, streams.ErrDrift) {
		t.Fatalf("Ensure = %v (%T), want *DriftError", err, err)
	}
	fields := map[string]streams.Drift{}
	for _, d := range de.Drift {
		if d.Resource != "JETFLOW_TASKS" {
			t.Errorf("drift on %s: %v", d.Resource, d)
		}
		fields[d.Field] = d
	}
	if d, ok := fields["Retention"]; !ok || d.Want != jetstream.WorkQueuePolicy.String() || d.Have != jetstream.LimitsPolicy.String() {
		t.Errorf("retention drift %+v missing or wrong in %v", d, de.Drift)
	}
	if _, ok := fields["Storage"]; !ok {
		t.Errorf("storage drift missing in %v", de.Drift)
	}
	if !slices.Equal(rep.Drift, de.Drift) {
		t.Errorf("Report.Drift %v differs from the error's %v", rep.Drift, de.Drift)
	}
	if !strings.Contains(err.Error(), "JETFLOW_TASKS: Retention is Limits, want WorkQueue") {
		t.Errorf("error %q does not say what differs", err)
	}
	// The other streams are still ensured.
	if !slices.Contains(rep.Created, "JETFLOW_DLQ") || !slices.Contains(rep.Created, "JETFLOW_ADVISORIES") {
		t.Errorf("report %+v", rep)
	}
}

func TestEnsureConcurrently(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			_, err := streams.Ensure(ctx, js, streams.Config{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent Ensure: %v", err)
		}
	}
}

func TestEnsureConfigErrors(t *testing.T) {
	t.Parallel()
	if _, err := streams.StreamConfigs(streams.Config{Replicas: 7}); err == nil || !strings.Contains(err.Error(), "replicas") {
		t.Errorf("Replicas 7: %v", err)
	}
	if _, err := streams.StreamConfigs(streams.Config{Prefix: "Bad"}); !errors.Is(err, streams.ErrInvalidPrefix) {
		t.Errorf("Prefix Bad: %v", err)
	}
	cfgs, err := streams.StreamConfigs(streams.Config{Prefix: "billing", Replicas: 3, MaxTaskBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	if cfgs[0].Name != "BILLING_TASKS" || cfgs[0].Replicas != 3 || cfgs[0].MaxBytes != 1<<30 ||
		slices.Contains(cfgs[0].Subjects, "billing.sched.>") || cfgs[0].Sources[0].Name != "BILLING_SCHEDULES" {
		t.Errorf("task stream config %+v", cfgs[0])
	}
	if cfgs[1].Name != "BILLING_SCHEDULES" || !cfgs[1].AllowMsgSchedules || !slices.Contains(cfgs[1].Subjects, "billing.sched.>") {
		t.Errorf("schedule stream config %+v", cfgs[1])
	}
}

func TestPrefixesDoNotShareStreams(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	// Two apps whose prefixes differ only by '-' versus '_' must not end up
	// on the same streams: the second Ensure would take the first app's
	// subjects away.
	a, b := streams.MustNames("my-app"), streams.MustNames("my_app")
	if a.TaskStream() == b.TaskStream() || a.StateBucket() == b.StateBucket() {
		t.Fatalf("prefixes my-app and my_app share stream %s", a.TaskStream())
	}
	for _, p := range []string{"my-app", "my_app"} {
		rep, err := streams.Ensure(ctx, js, streams.Config{Prefix: p})
		if err != nil {
			t.Fatalf("Ensure %s: %v", p, err)
		}
		if len(rep.Created) != 8 {
			t.Errorf("Ensure %s: %+v, want six new streams, the fired consumer and the movers' consumer", p, rep)
		}
	}
	if subj := streamConfig(t, ctx, js, a.TaskStream()).Subjects; !slices.Contains(subj, "my-app.task.normal.>") {
		t.Errorf("%s lost its subjects: %v", a.TaskStream(), subj)
	}
}

// Finding 6: the task stream admits work subjects of the four priorities
// only, so a task on "jetflow.task.urgent.x" is refused at the producer
// instead of stranding where no consumer reads it; Ensure narrows the
// subjects of a stream created before.
func TestTaskStreamAdmitsOnlyValidPriorities(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	cfgs, err := streams.StreamConfigs(streams.Config{})
	if err != nil {
		t.Fatal(err)
	}
	old := cfgs[0]
	old.Subjects = append([]string{"jetflow.task.>"}, old.Subjects[4:]...)
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil || !slices.Contains(rep.Updated, "JETFLOW_TASKS") {
		t.Fatalf("Ensure = %+v, %v; want JETFLOW_TASKS updated", rep, err)
	}
	if _, err := js.Publish(ctx, "jetflow.task.urgent.x", nil); err == nil {
		t.Errorf("publish on an invalid priority was stored")
	}
	if _, err := js.Publish(ctx, "jetflow.task.normal.x", nil); err != nil {
		t.Errorf("publish on a valid priority: %v", err)
	}
}
