package streams_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// fullBytes is the MaxTaskBytes of these tests: room for a few dozen small
// tasks.
const fullBytes = 4096

// fillTaskStream publishes tasks of tenant on a work subject until the task
// stream refuses one, and returns how many it stored and the refusal. It
// gives up after 1000 tasks (a stream that never refuses).
func fillTaskStream(t *testing.T, ctx context.Context, js jetstream.JetStream, tenant string) (int, error) {
	t.Helper()
	for i := range 1000 {
		msg := &nats.Msg{Subject: "jetflow.task.normal." + tenant, Data: make([]byte, 100),
			Header: nats.Header{jetstream.MsgIDHeader: {fmt.Sprintf("%s-%d", tenant, i)}}}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return i, err
		}
	}
	return 1000, nil
}

// isFull reports whether err is the stream's refusal at its size limit.
func isFull(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == 10077 && apiErr.Description == "maximum bytes exceeded"
}

// With MaxTaskBytes set, a full task stream refuses new tasks, whoever
// sends them, and keeps every waiting one: one tenant's flood cannot evict
// another tenant's tasks (issue 38, item 4). Before (discard-old), the
// flood was stored and the victim's oldest tasks were dropped.
func TestFullTaskStreamRefusesNewTasks(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{MaxTaskBytes: fullBytes}); err != nil {
		t.Fatal(err)
	}
	victim, err := fillTaskStream(t, ctx, js, "victim")
	if !isFull(err) || victim == 0 {
		t.Fatalf("victim stored %d tasks, then %v; want refused with maximum bytes exceeded", victim, err)
	}
	flood, err := fillTaskStream(t, ctx, js, "flood")
	if !isFull(err) || flood != 0 {
		t.Fatalf("flood stored %d tasks, then %v; want all refused", flood, err)
	}
	s, err := js.Stream(ctx, "JETFLOW_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("jetflow.task.>"))
	if err != nil {
		t.Fatal(err)
	}
	if got := info.State.Subjects["jetflow.task.normal.victim"]; got != uint64(victim) || info.State.FirstSeq != 1 {
		t.Fatalf("victim has %d tasks from sequence %d, want all %d from 1 (subjects %v)", got, info.State.FirstSeq, victim, info.State.Subjects)
	}
}

// A delayed task that fires while the task stream is full is not lost and
// evicts nothing: it waits in the schedule stream, and the task stream
// sources it once workers made room.
func TestFiredTaskWaitsWhileTaskStreamIsFull(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{MaxTaskBytes: fullBytes}); err != nil {
		t.Fatal(err)
	}
	victim, err := fillTaskStream(t, ctx, js, "victim")
	if !isFull(err) {
		t.Fatalf("filling: %v", err)
	}
	sched := &nats.Msg{Subject: "jetflow.sched.fires-when-full", Data: []byte("delayed"), Header: nats.Header{
		jetstream.ScheduleHeader:       {"@at " + time.Now().UTC().Format(time.RFC3339Nano)},
		jetstream.ScheduleTargetHeader: {"jetflow.fired.normal.delayed"},
		"Jetflow-Id":                   {"fires-when-full"},
	}}
	if _, err := js.PublishMsg(ctx, sched); err != nil {
		t.Fatal(err)
	}
	schedStream, err := js.Stream(ctx, "JETFLOW_SCHEDULES")
	if err != nil {
		t.Fatal(err)
	}
	// The schedule fires into its staging subject, where it stays.
	fired := func() uint64 {
		info, err := schedStream.Info(ctx, jetstream.WithSubjectFilter("jetflow.fired.>"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects["jetflow.fired.normal.delayed"]
	}
	testutil.Wait(t, 20*time.Second, "the schedule to fire", func() bool { return fired() == 1 })
	tasks, err := js.Stream(ctx, "JETFLOW_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	// The task stream's sourcing consumer has delivered it (it is pending
	// acknowledgement or was redelivered) and the task stream refused it:
	// nothing of the victim was evicted for it.
	// (A push consumer: the jetstream package looks up pull consumers
	// only.)
	legacy, err := js.Conn().JetStream()
	if err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, 20*time.Second, "the sourcing consumer to try the fired task", func() bool {
		ci, err := legacy.ConsumerInfo("JETFLOW_SCHEDULES", "tasks", nats.Context(ctx))
		return err == nil && ci.Delivered.Consumer > 0
	})
	info, err := tasks.Info(ctx, jetstream.WithSubjectFilter("jetflow.task.>"))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Subjects["jetflow.task.normal.victim"] != uint64(victim) || info.State.Subjects["jetflow.task.normal.delayed"] != 0 {
		t.Fatalf("task stream while full: %v; want the %d victim tasks only", info.State.Subjects, victim)
	}
	if n := fired(); n != 1 {
		t.Fatalf("fired task in the schedule stream: %d, want 1 (waiting)", n)
	}
	// A worker takes a task: the fired one comes in.
	if err := tasks.DeleteMsg(ctx, info.State.FirstSeq); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, 30*time.Second, "the fired task to reach the task stream", func() bool {
		info, err := tasks.Info(ctx, jetstream.WithSubjectFilter("jetflow.task.>"))
		return err == nil && info.State.Subjects["jetflow.task.normal.delayed"] == 1
	})
	testutil.Wait(t, 20*time.Second, "the fired task to leave the schedule stream", func() bool { return fired() == 0 })
}

// The task stream accepts no message TTL and no atomic batch: a producer
// cannot make its task expire unrun while its ID still counts as a
// duplicate (squatting on IDs it predicts), and nothing of jetflow needs
// either on task subjects (issue 38, item 4).
func TestTaskStreamRefusesTTLAndAtomicBatches(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"jetflow.task.normal.victim", "jetflow.ord.victim.0"} {
		ttl := &nats.Msg{Subject: subject, Header: nats.Header{jetstream.MsgIDHeader: {"predicted-id"}, jetstream.MsgTTLHeader: {"1s"}}}
		if _, err := js.PublishMsg(ctx, ttl); !apiCode(err, 10166) {
			t.Errorf("%s: publish with Nats-TTL: %v; want refused (per-message TTL is disabled)", subject, err)
		}
		batch := &nats.Msg{Subject: subject, Header: nats.Header{
			"Nats-Batch-Id": {"b1"}, "Nats-Batch-Sequence": {"1"}, "Nats-Batch-Commit": {"1"}}}
		if _, err := js.PublishMsg(ctx, batch); !apiCode(err, 10174) {
			t.Errorf("%s: atomic batch: %v; want refused (atomic publish is disabled)", subject, err)
		}
	}
	// The ID was not taken: the victim's task is stored.
	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: "jetflow.task.normal.victim", Header: nats.Header{jetstream.MsgIDHeader: {"predicted-id"}}})
	if err != nil || ack.Duplicate {
		t.Fatalf("victim's task: %+v, %v; want stored", ack, err)
	}
}

// apiCode reports whether err is a JetStream API error with code.
func apiCode(err error, code jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code
}

// A task stream of the previous configuration (discard-old, atomic
// publish and message TTL allowed) is moved to discard-new and loses
// atomic publish in place; message TTL, which the server cannot turn off,
// is reported as drift and left as it is.
func TestEnsureMovesTaskStreamToDiscardNew(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	for _, tc := range []struct {
		name string
		ttl  bool
	}{{"without TTL", false}, {"with TTL", true}} {
		if _, err := streams.Ensure(ctx, js, streams.Config{MaxTaskBytes: fullBytes}); err != nil {
			t.Fatal(err)
		}
		old := streamConfig(t, ctx, js, "JETFLOW_TASKS")
		old.Discard, old.AllowAtomicPublish = jetstream.DiscardOld, true
		if tc.ttl {
			if err := js.DeleteStream(ctx, "JETFLOW_TASKS"); err != nil {
				t.Fatal(err)
			}
			old.AllowMsgTTL = true
			if _, err := js.CreateStream(ctx, old); err != nil {
				t.Fatal(err)
			}
		} else if _, err := js.UpdateStream(ctx, old); err != nil {
			t.Fatal(err)
		}
		// A task stream that still allows message TTL works as before the
		// upgrade: reported as weaker, not failing Ensure.
		rep, err := streams.Ensure(ctx, js, streams.Config{MaxTaskBytes: fullBytes})
		switch {
		case err != nil:
			t.Fatalf("%s: Ensure = %v", tc.name, err)
		case tc.ttl && (len(rep.Weaker) != 1 || rep.Weaker[0].Resource != "JETFLOW_TASKS" || rep.Weaker[0].Field != "AllowMsgTTL"):
			t.Fatalf("%s: Weaker %+v; want JETFLOW_TASKS's AllowMsgTTL only", tc.name, rep.Weaker)
		case !tc.ttl && len(rep.Weaker) != 0:
			t.Fatalf("%s: Weaker %+v; want none", tc.name, rep.Weaker)
		}
		if len(rep.Updated) != 1 || rep.Updated[0] != "JETFLOW_TASKS" {
			t.Errorf("%s: Updated %v, want JETFLOW_TASKS", tc.name, rep.Updated)
		}
		now := streamConfig(t, ctx, js, "JETFLOW_TASKS")
		if now.Discard != jetstream.DiscardNew || now.AllowAtomicPublish || now.AllowMsgTTL != tc.ttl || now.MaxBytes != fullBytes {
			t.Errorf("%s: task stream after Ensure: discard %v, atomic %v, TTL %v, max bytes %d",
				tc.name, now.Discard, now.AllowAtomicPublish, now.AllowMsgTTL, now.MaxBytes)
		}
		if err := js.DeleteStream(ctx, "JETFLOW_TASKS"); err != nil {
			t.Fatal(err)
		}
	}
}

// The migration of decision 040 for a task stream that allows message TTL
// (which the server cannot turn off): take the source off the task stream,
// let the workers empty it, delete it, run Ensure. A delayed task that
// fires meanwhile waits in the schedule stream and reaches the new task
// stream; Ensure then reports no drift.
func TestTaskStreamWithTTLIsRecreatedWithoutLosingFiredTasks(t *testing.T) {
	t.Parallel()
	ctx, js := jsContext(t)
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	old := streamConfig(t, ctx, js, "JETFLOW_TASKS")
	if err := js.DeleteStream(ctx, "JETFLOW_TASKS"); err != nil {
		t.Fatal(err)
	}
	old.AllowMsgTTL, old.AllowAtomicPublish, old.Discard = true, true, jetstream.DiscardOld
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, "jetflow.task.normal.waiting", nil); err != nil {
		t.Fatal(err)
	}
	if rep, err := streams.Ensure(ctx, js, streams.Config{}); err != nil || len(rep.Weaker) != 1 {
		t.Fatalf("Ensure on a task stream with message TTL: %v, weaker %+v; want it reported weaker", err, rep.Weaker)
	}

	// 1. Take the source off: fired tasks wait in the schedule stream.
	cfg := streamConfig(t, ctx, js, "JETFLOW_TASKS")
	cfg.Sources = nil
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	sched := &nats.Msg{Subject: "jetflow.sched.during-migration", Data: []byte("delayed"), Header: nats.Header{
		jetstream.ScheduleHeader:       {"@at " + time.Now().UTC().Format(time.RFC3339Nano)},
		jetstream.ScheduleTargetHeader: {"jetflow.fired.normal.delayed"},
		"Jetflow-Id":                   {"during-migration"},
	}}
	if _, err := js.PublishMsg(ctx, sched); err != nil {
		t.Fatal(err)
	}
	schedStream, err := js.Stream(ctx, "JETFLOW_SCHEDULES")
	if err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, 20*time.Second, "the schedule to fire into the schedule stream", func() bool {
		info, err := schedStream.Info(ctx, jetstream.WithSubjectFilter("jetflow.fired.>"))
		return err == nil && info.State.Subjects["jetflow.fired.normal.delayed"] == 1
	})
	// 2. The workers empty the task stream (here: its one task).
	tasks, err := js.Stream(ctx, "JETFLOW_TASKS")
	if err != nil {
		t.Fatal(err)
	}
	if err := tasks.DeleteMsg(ctx, 1); err != nil {
		t.Fatal(err)
	}
	// 3. Delete it, 4. Ensure creates it anew.
	if err := js.DeleteStream(ctx, "JETFLOW_TASKS"); err != nil {
		t.Fatal(err)
	}
	rep, err := streams.Ensure(ctx, js, streams.Config{})
	if err != nil || len(rep.Drift) != 0 {
		t.Fatalf("Ensure after the migration: %+v, %v", rep, err)
	}
	if c := streamConfig(t, ctx, js, "JETFLOW_TASKS"); c.AllowMsgTTL || c.AllowAtomicPublish || c.Discard != jetstream.DiscardNew {
		t.Fatalf("new task stream: TTL %v, atomic %v, discard %v", c.AllowMsgTTL, c.AllowAtomicPublish, c.Discard)
	}
	testutil.Wait(t, 30*time.Second, "the delayed task to reach the new task stream", func() bool {
		s, err := js.Stream(ctx, "JETFLOW_TASKS")
		if err != nil {
			return false
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter("jetflow.task.>"))
		return err == nil && info.State.Subjects["jetflow.task.normal.delayed"] == 1
	})
}
