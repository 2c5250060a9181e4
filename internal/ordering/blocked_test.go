package ordering

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newBucket(t *testing.T) (jetstream.JetStream, jetstream.KeyValue) {
	t.Helper()
	_, js := testutil.JetStream(t, testutil.RunServer(t))
	kv, err := EnsureBucket(t.Context(), js, "ORDERING", "NO_TASK_STREAM")
	if err != nil {
		t.Fatal(err)
	}
	return js, kv
}

// testNames: partition consumers "ordered-<type>-<n>-<p>", slot subjects
// "o.<type>.<slot>".
type testNames struct{}

func (testNames) OrderedConsumerName(taskType string, partitions, partition int) string {
	return fmt.Sprintf("ordered-%s-%d-%d", taskType, partitions, partition)
}

func (testNames) ParseOrderedSubject(subject string) (string, int, error) {
	parts := strings.Split(subject, ".")
	if len(parts) != 3 || parts[0] != "o" {
		return "", 0, errors.New("not a slot subject")
	}
	slot, err := strconv.Atoi(parts[2])
	return parts[1], slot, err
}

func validName(s string) error {
	if s == "" || strings.ContainsAny(s, " .*>") {
		return errors.New("invalid")
	}
	return nil
}

var testRules = Rules{
	Names: testNames{}, MetaTaskType: "jetflow_type", MetaPartition: "jetflow_partition",
	TaskType: validName, ID: validName,
	Partitions: func(n int) error {
		if n < 1 || n > 64 {
			return errors.New("invalid")
		}
		return nil
	},
}

// A task blocked by this process is held with its error until an operator
// resolves it: "retry" runs it once more, "skip" dead-letters it, and
// either removes the record.
func TestBlockerHoldsUntilResolved(t *testing.T) {
	t.Parallel()
	js, kv := newBucket(t)
	b := NewBlocker(kv, "emails", quiet())
	if v, _, err := b.Before(t.Context(), "t1", 1); v != Run || err != nil {
		t.Fatalf("first attempt: %v, %v; want Run", v, err)
	}
	for _, tc := range []struct {
		resolution string
		want       Verdict
	}{{ResolveRetry, Run}, {ResolveSkip, Skip}} {
		b.Block(t.Context(), Blocked{Type: "emails", TaskID: "t1", Key: "user 7", Error: "smtp down", Since: time.Now(), Attempts: 3})
		v, cause, err := b.Before(t.Context(), "t1", 1)
		if v != Hold || cause != "smtp down" || err != nil {
			t.Fatalf("blocked: %v, %q, %v; want Hold with its error", v, cause, err)
		}
		if err := Resolve(t.Context(), js, "ORDERING", "emails", "t1", tc.resolution); err != nil {
			t.Fatal(err)
		}
		if v, _, err := b.Before(t.Context(), "t1", 4); v != tc.want || err != nil {
			t.Errorf("resolved %s: %v, %v; want %v", tc.resolution, v, err, tc.want)
		}
		if _, err := kv.Get(t.Context(), BlockedKey("emails", "t1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("resolved %s: record still there (%v)", tc.resolution, err)
		}
		// No longer this process's: a later first attempt runs unchecked.
		if v, _, _ := b.Before(t.Context(), "t1", 1); v != Run {
			t.Errorf("after %s: %v; want Run", tc.resolution, v)
		}
	}
}

// Another process's blocked task, delivered here again, is held too; a
// redelivered task without a record runs; a record this process lost is
// written again.
func TestBlockerReadsRecords(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	other := NewBlocker(kv, "emails", quiet())
	other.Block(t.Context(), Blocked{Type: "emails", TaskID: "t2", Key: "k", Error: "boom"})
	b := NewBlocker(kv, "emails", quiet())
	if v, cause, _ := b.Before(t.Context(), "t2", 2); v != Hold || cause != "boom" {
		t.Errorf("another process's blocked task: %v, %q; want Hold", v, cause)
	}
	if v, _, _ := b.Before(t.Context(), "t3", 2); v != Run {
		t.Errorf("a redelivered task without a record: %v; want Run", v)
	}
	if err := kv.Delete(t.Context(), BlockedKey("emails", "t2")); err != nil {
		t.Fatal(err)
	}
	if v, _, _ := other.Before(t.Context(), "t2", 2); v != Hold {
		t.Errorf("own task whose record is gone: %v; want Hold", v)
	}
	if _, err := kv.Get(t.Context(), BlockedKey("emails", "t2")); err != nil {
		t.Errorf("the lost record was not written again: %v", err)
	}
}

// Records the operator's list would not show (not JSON, another task's,
// another type's, an invalid key) are removed and the task runs: a task
// held on one of them could never be resolved.
func TestBlockerRemovesInvalidRecords(t *testing.T) {
	t.Parallel()
	_, kv := newBucket(t)
	b := NewBlocker(kv, "emails", quiet())
	for name, val := range map[string]string{
		"not JSON":     "{not json",
		"another task": `{"type":"emails","id":"other","key":"k"}`,
		"another type": `{"type":"sms","id":"t4","key":"k"}`,
		"invalid key":  `{"type":"emails","id":"t4","key":"a\nb"}`,
		"no key":       `{"type":"emails","id":"t4"}`,
	} {
		rk := BlockedKey("emails", "t4")
		if _, err := kv.Put(t.Context(), rk, []byte(val)); err != nil {
			t.Fatal(err)
		}
		if v, _, err := b.Before(t.Context(), "t4", 2); v != Run || err != nil {
			t.Errorf("%s: %v, %v; want Run", name, v, err)
		}
		if _, err := kv.Get(t.Context(), rk); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("%s: record kept (%v)", name, err)
		}
	}
}

// A record that cannot be read fails a task of another process (retried
// with backoff) and holds one of this process.
func TestBlockerUnreadable(t *testing.T) {
	t.Parallel()
	js, kv := newBucket(t)
	b := NewBlocker(kv, "emails", quiet())
	b.Block(t.Context(), Blocked{Type: "emails", TaskID: "mine", Key: "k", Error: "boom"})
	if err := js.DeleteKeyValue(t.Context(), "ORDERING"); err != nil {
		t.Fatal(err)
	}
	if v, _, err := b.Before(t.Context(), "theirs", 2); v != Fail || err == nil {
		t.Errorf("unreadable, not ours: %v, %v; want Fail with an error", v, err)
	}
	if v, _, err := b.Before(t.Context(), "mine", 2); v != Hold || err != nil {
		t.Errorf("unreadable, ours: %v, %v; want Hold", v, err)
	}
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	js, kv := newBucket(t)
	if err := Resolve(t.Context(), js, "ORDERING", "emails", "none", ResolveRetry); !errors.Is(err, ErrNotBlocked) {
		t.Errorf("no record: %v; want ErrNotBlocked", err)
	}
	if err := Resolve(t.Context(), js, "NO_BUCKET", "emails", "none", ResolveRetry); !errors.Is(err, ErrNotBlocked) {
		t.Errorf("no bucket: %v; want ErrNotBlocked", err)
	}
	if _, err := kv.Put(t.Context(), BlockedKey("emails", "bad"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if err := Resolve(t.Context(), js, "ORDERING", "emails", "bad", ResolveRetry); err == nil || errors.Is(err, ErrNotBlocked) {
		t.Errorf("garbage record: %v; want a decoding error", err)
	}
}

// ListBlocked shows only records that pass validation, under their own
// key.
func TestListBlocked(t *testing.T) {
	t.Parallel()
	js, kv := newBucket(t)
	NewBlocker(kv, "emails", quiet()).Block(t.Context(), Blocked{Type: "emails", TaskID: "ok", Key: "k"})
	put := func(k string, b Blocked) {
		t.Helper()
		v, _ := json.Marshal(b)
		if _, err := kv.Put(t.Context(), k, v); err != nil {
			t.Fatal(err)
		}
	}
	put(BlockedKey("emails", "moved"), Blocked{Type: "emails", TaskID: "elsewhere", Key: "k"}) // under another task's key
	put(BlockedKey("emails", "badkey"), Blocked{Type: "emails", TaskID: "badkey", Key: ""})
	put("bad_type.x", Blocked{Type: "bad type", TaskID: "x", Key: "k"})
	if _, err := kv.Put(t.Context(), "emails.garbage", []byte("{")); err != nil {
		t.Fatal(err)
	}
	got, err := testRules.ListBlocked(t.Context(), js, "ORDERING")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].TaskID != "ok" {
		t.Errorf("ListBlocked = %+v; want only ok", got)
	}
	if got, err := testRules.ListBlocked(t.Context(), js, "NO_BUCKET"); got != nil || err != nil {
		t.Errorf("missing bucket: %v, %v", got, err)
	}
}

func TestHeld(t *testing.T) {
	t.Parallel()
	err := fmt.Errorf("wrapped: %w", &HoldError{Cause: "smtp down"})
	d, ok := Held(err)
	if !ok || d < BlockedRecheck/2 || d >= BlockedRecheck/2+BlockedRecheck {
		t.Errorf("Held = %v, %v", d, ok)
	}
	if !strings.Contains(err.Error(), "smtp down") {
		t.Errorf("HoldError text %q lacks its cause", err)
	}
	if _, ok := Held(errors.New("other")); ok {
		t.Error("Held of another error = true")
	}
}

// Partition reads a partition consumer's state and the head it waits
// for; consumers whose metadata or name do not match are not partitions.
func TestPartition(t *testing.T) {
	t.Parallel()
	_, js := testutil.JetStream(t, testutil.RunServer(t))
	ctx := t.Context()
	stream, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "TASKS", Subjects: []string{"o.>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	name := testNames{}.OrderedConsumerName("emails", 4, 1)
	cons, err := js.CreateOrUpdateConsumer(ctx, "TASKS", jetstream.ConsumerConfig{
		Durable: name, FilterSubjects: []string{"o.emails.1", "o.emails.5"}, AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 1, Metadata: map[string]string{"jetflow_type": "emails", "jetflow_partition": "1/4"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2"} {
		h := nats.Header{HeaderKey: {"user 7"}, jetstream.MsgIDHeader: {id}}
		if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: "o.emails.5", Header: h}); err != nil {
			t.Fatal(err)
		}
	}
	var ci *jetstream.ConsumerInfo
	testutil.Wait(t, 10*time.Second, "both tasks pending", func() bool {
		ci, err = cons.Info(ctx)
		return err == nil && ci.NumPending == 2
	})
	ps, ok := testRules.Partition(ctx, stream, ci)
	if !ok || ps.Type != "emails" || ps.Partition != 1 || ps.Partitions != 4 || ps.Pending != 2 || ps.Head != nil {
		t.Fatalf("idle partition: %+v, %v", ps, ok)
	}
	if _, err := cons.Fetch(1, jetstream.FetchMaxWait(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, 10*time.Second, "the task in flight", func() bool {
		ci, err = cons.Info(ctx)
		return err == nil && ci.NumAckPending == 1
	})
	ps, ok = testRules.Partition(ctx, stream, ci)
	if !ok || ps.Head == nil || ps.Head.TaskID != "t1" || ps.Head.Key != "user 7" || ps.Head.Sequence != 1 || ps.Head.Retrying {
		t.Fatalf("partition with a task in flight: %+v %+v", ps, ps.Head)
	}

	// Hostile or foreign consumers.
	for _, tc := range []struct {
		name, consumer string
		meta           map[string]string
	}{
		{"no metadata", name, nil},
		{"no partition", name, map[string]string{"jetflow_type": "emails"}},
		{"invalid type", name, map[string]string{"jetflow_type": "a b", "jetflow_partition": "1/4"}},
		{"not a fraction", name, map[string]string{"jetflow_type": "emails", "jetflow_partition": "1"}},
		{"not numbers", name, map[string]string{"jetflow_type": "emails", "jetflow_partition": "x/y"}},
		{"partition past the count", name, map[string]string{"jetflow_type": "emails", "jetflow_partition": "4/4"}},
		{"negative partition", name, map[string]string{"jetflow_type": "emails", "jetflow_partition": "-1/4"}},
		{"count out of range", name, map[string]string{"jetflow_type": "emails", "jetflow_partition": "1/100000"}},
		{"huge numbers", name, map[string]string{"jetflow_type": "emails", "jetflow_partition": strings.Repeat("9", 40) + "/4"}},
		{"another name", "ordered-emails-4-2", map[string]string{"jetflow_type": "emails", "jetflow_partition": "1/4"}},
	} {
		ci := &jetstream.ConsumerInfo{Name: tc.consumer, Config: jetstream.ConsumerConfig{Metadata: tc.meta}}
		if ps, ok := testRules.Partition(ctx, stream, ci); ok {
			t.Errorf("%s: read as partition %+v", tc.name, ps)
		}
	}
}
