package inspect_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func setup(t *testing.T) *framework.Client {
	t.Helper()
	srv := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, srv)
	if _, err := streams.Ensure(t.Context(), js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	cl, err := framework.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestBreakerRecordsSkipHostileKeys stores breaker records under keys that
// no worker writes (published to the bucket's subjects by another tool):
// they are skipped, and the worker's record is still listed.
func TestBreakerRecordsSkipHostileKeys(t *testing.T) {
	t.Parallel()
	cl := setup(t)
	ctx := t.Context()
	rec := []byte(`{"state":"open","since":"2026-01-01T00:00:00Z","worker":"w1"}`)
	prefix := "$KV." + cl.Names().BreakerBucket() + "."
	for _, key := range []string{"bank", "bad@key", "a/b", "x=y", "\xff\xfe"} {
		if _, err := cl.JetStream().Publish(ctx, prefix+key, rec); err != nil {
			t.Fatalf("publish %q: %v", key, err)
		}
	}
	recs, err := inspect.New(cl).BreakerRecords(ctx)
	if err != nil {
		t.Fatalf("breaker records: %v", err)
	}
	if len(recs) != 1 || recs[0].Dependency != "bank" {
		t.Fatalf("records %+v, want only bank", recs)
	}
}

// TestQueueStatsIgnoreHostileNames stores dead letters on subjects that name
// no valid task type and a consumer whose metadata names none, as another
// tool could: QueueStats, whose types become metric labels, reports only
// valid task types.
func TestQueueStatsIgnoreHostileNames(t *testing.T) {
	t.Parallel()
	cl := setup(t)
	ctx := t.Context()
	js, names := cl.JetStream(), cl.Names()
	for _, typ := range []string{"mail.send", "Mail.Send", strings.Repeat("x", 3000), "bad\xfftype"} {
		if _, err := js.Publish(ctx, names.DLQSubject(typ), nil); err != nil {
			t.Fatalf("publish dead letter %q: %v", typ, err)
		}
	}
	stream, err := js.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	_, err = stream.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "hostile", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: names.TaskSubject(framework.PriorityHigh, "real.type"),
		Metadata:      map[string]string{topology.MetaTaskType: "Not A Type " + strings.Repeat("y", 500), topology.MetaPriority: "high"}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := inspect.New(cl).QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Dead) != 1 || st.Dead["mail.send"] != 1 {
		t.Errorf("dead letters of %d types (mail.send: %d), want only mail.send", len(st.Dead), st.Dead["mail.send"])
	}
	if len(st.Queues) != 1 || st.Queues[0].Type != "real.type" || st.Queues[0].Priority != framework.PriorityHigh {
		t.Errorf("%d queues, want only real.type/high", len(st.Queues))
	}
}

// TestOverviewBoundsStrandedSubjects publishes tasks to more distinct work
// subjects than [inspect.MaxStrandedSubjects], none of them served: the
// overview dates and lists at most that many (each costs a direct get)
// and says how many it left out.
func TestOverviewBoundsStrandedSubjects(t *testing.T) {
	t.Parallel()
	cl := setup(t)
	ctx := t.Context()
	js, names := cl.JetStream(), cl.Names()
	const extra = 5
	for i := range inspect.MaxStrandedSubjects + extra {
		if _, err := js.PublishAsync(names.TaskSubject(framework.PriorityLow, fmt.Sprintf("junk.t%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	// One subject with more tasks than the others is among those kept.
	for range 3 {
		if _, err := js.PublishAsync(names.TaskSubject(framework.PriorityLow, "junk.busy"), nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	ov, err := inspect.New(cl).Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var stranded int
	var busy bool
	for _, q := range ov.Queues {
		if q.Stranded {
			stranded++
			busy = busy || (q.Type == "junk.busy" && q.Waiting == 3 && !q.OldestWaiting.IsZero())
		}
	}
	if stranded != inspect.MaxStrandedSubjects || ov.StrandedOmitted != extra+1 || !busy {
		t.Errorf("%d stranded queues listed, %d omitted, busy one listed %v; want %d, %d, true",
			stranded, ov.StrandedOmitted, busy, inspect.MaxStrandedSubjects, extra+1)
	}
}

// TestQueueStatsBoundUnservedQueues stores delayed tasks of more distinct
// types than [inspect.MaxUnservedQueues], none served, and dead letters of
// as many types, as any producer could: each listing holds at most that
// many (rows and metric series), and the counts of the others are kept.
func TestQueueStatsBoundUnservedQueues(t *testing.T) {
	t.Parallel()
	cl := setup(t)
	ctx := t.Context()
	js, names := cl.JetStream(), cl.Names()
	const extra = 5
	n := inspect.MaxUnservedQueues + extra
	jobs := make([]framework.TaskSpec, n)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: fmt.Sprintf("later.t%d", i), Options: []framework.EnqueueOption{framework.In(time.Hour)}}
	}
	if _, err := cl.EnqueueMany(ctx, jobs); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := js.PublishAsync(names.DLQSubject(fmt.Sprintf("dead.t%d", i)), nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // the type with most records is listed
		if _, err := js.PublishAsync(names.DLQSubject("dead.busy"), nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	st, err := inspect.New(cl).QueueStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	scheduled := 0
	for _, q := range st.Queues {
		scheduled += q.Scheduled
	}
	if len(st.Queues) != inspect.MaxUnservedQueues || scheduled+st.UnlistedScheduled != n || st.UnlistedScheduled != extra || st.Scheduled != n {
		t.Errorf("%d queues listed holding %d delayed tasks, %d unlisted, %d in all; want %d queues, %d unlisted, %d in all",
			len(st.Queues), scheduled, st.UnlistedScheduled, st.Scheduled, inspect.MaxUnservedQueues, extra, n)
	}
	if len(st.Dead) != inspect.MaxUnservedQueues || st.Dead["dead.busy"] != 3 || st.UnlistedDead != extra+1 {
		t.Errorf("dead letters of %d types listed (dead.busy: %d), %d unlisted; want %d types, 3, %d",
			len(st.Dead), st.Dead["dead.busy"], st.UnlistedDead, inspect.MaxUnservedQueues, extra+1)
	}
	ov, err := inspect.New(cl).Overview(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(n + 3); ov.DeadTotal != want {
		t.Errorf("overview counts %d dead letters in all, want %d", ov.DeadTotal, want)
	}
}
