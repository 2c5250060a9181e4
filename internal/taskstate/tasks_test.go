package taskstate

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/staterec"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// env is one server with the default topology but no state bucket, its
// names and the tasks of its deployment, whose Wait creates the bucket.
type env struct {
	*testutil.Env
	names streams.Names
	tasks *Tasks
}

func newEnv(t *testing.T) *env {
	t.Helper()
	te := testutil.NewEnv(t, streams.Config{})
	n := streams.MustNames("")
	if err := te.JS.DeleteKeyValue(t.Context(), n.StateBucket()); err != nil {
		t.Fatal(err)
	}
	return &env{Env: te, names: n, tasks: New(te.Conn, te.JS, n, func(ctx context.Context) error { return ensure(ctx, te.JS, n) })}
}

// ensure creates the state and effects buckets with their default
// retention.
func ensure(ctx context.Context, js jetstream.JetStream, n streams.Names) error {
	return topology.EnsureRetention(ctx, js, n, 0, 0)
}

// bucket creates the state bucket and returns it.
func (e *env) bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	if err := ensure(t.Context(), e.JS, e.names); err != nil {
		t.Fatal(err)
	}
	kv, err := e.JS.KeyValue(t.Context(), e.names.StateBucket())
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// put writes rec as the record of its task and returns its revision.
func put(t *testing.T, kv jetstream.KeyValue, rec staterec.Record) uint64 {
	t.Helper()
	rev, err := kv.Put(t.Context(), staterec.Key(rec.ID), rec.AppendJSON(nil))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// delay enqueues task id of type typ, due in an hour, as a client does: it
// waits in the delay stream (no mover runs).
func (e *env) delay(t *testing.T, id, typ string, prio streams.Priority, headers map[string]string) time.Time {
	t.Helper()
	now := time.Now()
	due := now.Add(time.Hour).UTC().Truncate(time.Millisecond)
	msg, delayed := taskmsg.Build(taskmsg.Spec{Target: e.names.TaskSubject(prio, typ), ID: id, Data: []byte("{}"),
		Headers: headers, Due: due, Now: now, DelaySubject: e.names.DelaySubject(id),
		ScheduleTarget: e.names.FiredSubject(prio, typ)})
	if !delayed {
		t.Fatal("not a delayed task")
	}
	if _, err := e.JS.PublishMsg(t.Context(), msg); err != nil {
		t.Fatal(err)
	}
	return due
}

// Get finds a task's record, or else its pending schedule, or reports it
// not found.
func TestGet(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()

	// No state bucket: only schedules are found.
	for _, id := range []string{"", "nothing", "not a valid id"} {
		if _, err := e.tasks.Get(ctx, id); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get(%q) without a bucket: %v, want ErrNotFound", id, err)
		}
	}
	due := e.delay(t, "later", "email.send", streams.PriorityHigh, nil)
	rec, err := e.tasks.Get(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	if rec.ID != "later" || rec.Type != "email.send" || rec.Priority != "high" || rec.State != staterec.Scheduled ||
		!rec.ScheduledFor.Equal(due) || rec.Sequence == 0 || rec.EnqueuedAt.IsZero() || rec.Revision != 0 {
		t.Fatalf("Get of a pending task = %+v", rec)
	}

	// A record wins over the schedule, with its revision.
	kv := e.bucket(t)
	want := staterec.Record{ID: "later", Type: "email.send", Priority: "high", State: staterec.Running, Attempt: 1,
		UpdatedAt: time.Now().UTC(), Progress: staterec.Progress{Done: 1, Total: 4, Message: "m"}, Result: []byte(`{"a":1}`)}
	want.Revision = put(t, kv, want)
	rec, err = e.tasks.Get(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != staterec.Running || rec.Revision != want.Revision || rec.Progress != want.Progress ||
		string(rec.Result) != `{"a":1}` || !rec.UpdatedAt.Equal(want.UpdatedAt) {
		t.Fatalf("Get = %+v, want %+v", rec, want)
	}

	// A deleted record: the schedule again.
	if err := kv.Delete(ctx, staterec.Key("later")); err != nil {
		t.Fatal(err)
	}
	if rec, err := e.tasks.Get(ctx, "later"); err != nil || rec.State != staterec.Scheduled {
		t.Fatalf("Get after the record's deletion = %+v, %v", rec, err)
	}

	// An ID of any bytes has its key; a bad record is an error.
	if _, err := kv.Put(ctx, staterec.Key("odd id:1"), []byte(`{"id":"odd id:1","priority":"urgent"}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.tasks.Get(ctx, "odd id:1"); err == nil || !strings.Contains(err.Error(), "bad record") || errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of a bad record: %v", err)
	}
	if _, err := e.tasks.Get(ctx, "none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get of an unknown task with a bucket: %v", err)
	}
}

// Cancel purges a pending schedule and writes the "cancelled" record
// where one is kept or awaited.
func TestCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := t.Context()

	if err := e.tasks.Cancel(ctx, "not valid"); !errors.Is(err, streams.ErrInvalidID) {
		t.Fatalf("Cancel of an invalid ID: %v", err)
	}
	// Without a bucket, nothing is recorded.
	e.delay(t, "quiet", "a", streams.PriorityNormal, nil)
	if err := e.tasks.Cancel(ctx, "quiet"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.tasks.Get(ctx, "quiet"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after the cancellation: %v, want ErrNotFound", err)
	}
	if err := e.tasks.Cancel(ctx, "quiet"); !errors.Is(err, ErrNotFound) || errors.Is(err, ErrNotCancellable) {
		t.Fatalf("second Cancel: %v, want ErrNotFound only", err)
	}

	kv := e.bucket(t)
	// No record and not awaited: none written.
	e.delay(t, "plain", "a", streams.PriorityNormal, nil)
	if err := e.tasks.Cancel(ctx, "plain"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, staterec.Key("plain")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("record of an untracked cancelled task: %v", err)
	}
	// Awaited, or with a record: the cancelled record.
	due := e.delay(t, "awaited", "b.c", streams.PriorityLow, map[string]string{staterec.HeaderAwaited: "1"})
	e.delay(t, "tracked", "b.c", streams.PriorityCritical, nil)
	put(t, kv, staterec.Record{ID: "tracked", Type: "b.c", Priority: "critical", State: staterec.Scheduled})
	for id, prio := range map[string]string{"awaited": "low", "tracked": "critical"} {
		if err := e.tasks.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
		rec, err := e.tasks.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if rec.State != staterec.Cancelled || rec.Type != "b.c" || rec.Priority != prio || rec.FinishedAt.IsZero() ||
			rec.EnqueuedAt.IsZero() || id == "awaited" && !rec.ScheduledFor.Equal(due) {
			t.Errorf("record of cancelled %s = %+v", id, rec)
		}
	}
	// A task with a record but no schedule is not cancellable.
	put(t, kv, staterec.Record{ID: "done", Priority: "normal", State: staterec.Succeeded})
	err := e.tasks.Cancel(ctx, "done")
	if !errors.Is(err, ErrNotCancellable) || !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "is succeeded") {
		t.Fatalf("Cancel of a finished task: %v", err)
	}

	// A closed connection.
	e.Conn.Close()
	if err := e.tasks.Cancel(ctx, "any"); !errors.Is(err, natserr.ErrNotConnected) {
		t.Fatalf("Cancel on a closed connection: %v, want ErrNotConnected", err)
	}
}

// waitErr says what a timeout may mean, and that a closed connection is
// one.
func TestWaitErr(t *testing.T) {
	t.Parallel()
	nc := testutil.Connect(t, testutil.RunServer(t))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ts := New(nc, js, streams.MustNames(""), nil)
	other := errors.New("other")
	if ts.waitErr(nil) != nil || ts.waitErr(other) != other {
		t.Error("waitErr changed nil or an unrelated error")
	}
	for _, err := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders} {
		got := ts.waitErr(err)
		if !errors.Is(got, err) || !strings.Contains(got.Error(), "$JS.API.CONSUMER.CREATE.KV_JETFLOW_STATE.>") {
			t.Errorf("waitErr(%v) = %v, want the permissions it needs", err, got)
		}
	}
	nc.Close()
	if got := ts.waitErr(other); !errors.Is(got, natserr.ErrNotConnected) || !errors.Is(got, other) {
		t.Errorf("waitErr on a closed connection = %v", got)
	}
	if got := ts.waitErr(natserr.ErrNotConnected); got != natserr.ErrNotConnected {
		t.Errorf("waitErr(ErrNotConnected) = %v, want it as it is", got)
	}
}
