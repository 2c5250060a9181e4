package dlq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// forgedRecord is a dead-letter record of typ for task id, a permanent
// failure, as any publisher on the dead-letter subjects can store one.
func forgedRecord(typ, id string, data []byte) *nats.Msg {
	m := &nats.Msg{Subject: streams.MustNames("").DLQSubject(typ), Header: nats.Header{}, Data: data}
	m.Header.Set(framework.HeaderTaskID, id)
	m.Header.Set(dlq.HeaderType, typ)
	m.Header.Set(dlq.HeaderPriority, "normal")
	m.Header.Set(dlq.HeaderReason, string(dlq.ReasonPermanent))
	return m
}

// TestReplayAllSkipsRecordTooLargeToReplay stores, as any publisher on the
// dead-letter subjects could, a record that fills the server's max payload
// between two ordinary ones: the replay's own headers do not fit, so the
// record is skipped and reported, and the records after it are replayed.
func TestReplayAllSkipsRecordTooLargeToReplay(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	record := func(id string, size int) *nats.Msg {
		return forgedRecord("acct.refund", id, []byte(`"`+strings.Repeat("x", max(size-2, 0))+`"`))
	}
	// The big record's headers and payload make exactly the max payload.
	framing := len("NATS/1.0\r\n\r\n")
	for k, vs := range record("big", 0).Header {
		for _, v := range vs {
			framing += len(k) + len(": \r\n") + len(v)
		}
	}
	big := record("big", int(e.Conn.MaxPayload())-framing)
	for _, m := range []*nats.Msg{record("first", 10), big, record("last", 10)} {
		if _, err := e.JS.PublishMsg(ctx, m); err != nil {
			t.Fatalf("store record %s: %v", m.Header.Get(framework.HeaderTaskID), err)
		}
	}
	q := dlq.New(e.Client)
	n, err := q.ReplayAll(ctx, nil)
	if n != 2 || err == nil {
		t.Fatalf("ReplayAll = %d, %v; want 2 replayed and the big record reported", n, err)
	}
	left, _, err := q.List(ctx, dlq.Filter{}, dlq.Page{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, r := range left {
		ids = append(ids, r.TaskID)
	}
	if len(ids) != 1 || ids[0] != "big" {
		t.Fatalf("records left after the replay: %q, want the big one only", ids)
	}
}

// TestForgedDeadMarkDoesNotDropTask writes, as anyone allowed to publish on
// the errors bucket could, the mark that says a task already has its
// dead-letter record: the task still gets its record when it dies, rather
// than being deleted without one.
func TestForgedDeadMarkDoesNotDropTask(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	names := streams.MustNames("")
	const typ = "acct.refund"
	info := e.Enqueue(t, typ, "r-1")
	kv, err := e.JS.KeyValue(ctx, names.ErrorsBucket())
	if err != nil {
		t.Fatal(err)
	}
	mark, err := json.Marshal(map[string]any{"task_id": info.ID, "dlq_seq": 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, fmt.Sprintf("%d.dead", info.Sequence), mark); err != nil {
		t.Fatal(err)
	}

	w := e.Worker(t)
	// The first attempt fails, so that the second one reads the task's
	// failures, the mark among them, before it dead-letters the task.
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		if task.Attempt == 1 {
			return errors.New("flaky")
		}
		return framework.Permanent(errors.New("refund refused"))
	}, framework.WithBackoff(framework.BackoffPolicy{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond}))
	testutil.StartWorker(t, w)

	tasks, err := e.JS.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	// The worker deletes the task once it wrote the record (or took the
	// mark for it).
	testutil.Wait(t, time.Minute, "the task deleted", func() bool {
		_, err := tasks.GetMsg(ctx, info.Sequence)
		return errors.Is(err, jetstream.ErrMsgNotFound)
	})
	recs, _, err := dlq.New(e.Client).List(ctx, dlq.Filter{Type: typ}, dlq.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].TaskID != info.ID || recs[0].Reason != dlq.ReasonPermanent {
		t.Fatalf("records = %+v, want the permanent failure of task %s", recs, info.ID)
	}
}

// TestListPageIsBoundedInBytes stores records as large as the server's max
// payload: a page asking for a thousand ends once it holds MaxPageBytes, and
// its cursors still lead through every record.
func TestListPageIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	names := streams.MustNames("")
	payload := make([]byte, e.Conn.MaxPayload()-4096)
	n := dlq.MaxPageBytes/len(payload) + 4
	for i := range n {
		m := &nats.Msg{Subject: names.DLQSubject("acct.refund"), Header: nats.Header{}, Data: payload}
		m.Header.Set(framework.HeaderTaskID, fmt.Sprintf("t-%d", i))
		if _, err := e.JS.PublishMsg(ctx, m); err != nil {
			t.Fatalf("store record %d: %v", i, err)
		}
	}
	q := dlq.New(e.Client)
	seen := 0
	var after uint64
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatalf("more than %d pages for %d records", n, n)
		}
		recs, next, err := q.List(ctx, dlq.Filter{}, dlq.Page{Limit: dlq.MaxPageLimit, After: after})
		if err != nil {
			t.Fatal(err)
		}
		bytes := 0
		for _, r := range recs {
			bytes += len(r.Payload)
		}
		if bytes > dlq.MaxPageBytes+len(payload) {
			t.Fatalf("page of %d records holds %d bytes of payload, want at most %d and one record", len(recs), bytes, dlq.MaxPageBytes)
		}
		seen += len(recs)
		if next == 0 {
			break
		}
		after = next
	}
	if seen != n {
		t.Fatalf("pages held %d records, want %d", seen, n)
	}
}

// TestListAfterLastPossibleCursor asks for the records after the largest
// sequence there is: there are none, where the cursor's successor would wrap
// to the first record.
func TestListAfterLastPossibleCursor(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	m := &nats.Msg{Subject: streams.MustNames("").DLQSubject("acct.refund"), Header: nats.Header{}, Data: []byte(`"x"`)}
	m.Header.Set(framework.HeaderTaskID, "t-1")
	if _, err := e.JS.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	recs, next, err := dlq.New(e.Client).List(ctx, dlq.Filter{}, dlq.Page{After: math.MaxUint64})
	if err != nil || len(recs) != 0 || next != 0 {
		t.Fatalf("List after MaxUint64 = %d records, next %d, %v; want none", len(recs), next, err)
	}
}

// TestReplayIDCannotBeForeseen publishes, as any producer on the task
// subjects could, a task under the deduplication ID a replay of a record
// would have if it were derived from the record's sequence alone: the
// replay is not dropped as its duplicate (which would delete the record and
// lose the task), and the task stream holds the record's task.
func TestReplayIDCannotBeForeseen(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	names := streams.MustNames("")
	const typ = "acct.refund"
	ack, err := e.JS.PublishMsg(ctx, forgedRecord(typ, "refund-42", []byte(`{"order":42}`)))
	if err != nil {
		t.Fatal(err)
	}
	forged := &nats.Msg{Subject: names.TaskSubject(framework.PriorityNormal, typ), Header: nats.Header{}, Data: []byte(`{"order":0}`)}
	forged.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("replay-%s-%d", names.DLQStream(), ack.Sequence))
	forged.Header.Set(framework.HeaderTaskID, "forged")
	if _, err := e.JS.PublishMsg(ctx, forged); err != nil {
		t.Fatal(err)
	}
	info, err := dlq.New(e.Client).Replay(ctx, ack.Sequence)
	if err != nil || info.Duplicate {
		t.Fatalf("Replay = %+v, %v; want the record's task enqueued, not dropped as a duplicate", info, err)
	}
	// The replay's schedule fires the record's task onto the work subject,
	// after the forged one.
	s, err := e.JS.Stream(ctx, names.TaskStream())
	if err != nil {
		t.Fatal(err)
	}
	var m *jetstream.RawStreamMsg
	testutil.Wait(t, 30*time.Second, "the replayed task on its work subject", func() bool {
		m, err = s.GetLastMsgForSubject(ctx, names.TaskSubject(framework.PriorityNormal, typ))
		return err == nil && m.Header.Get(framework.HeaderTaskID) != "forged"
	})
	if id := m.Header.Get(framework.HeaderTaskID); id != "refund-42" || string(m.Data) != `{"order":42}` {
		t.Fatalf("replayed task: ID %q, payload %s; want the record's", id, m.Data)
	}
}

// TestReplayRefusesInvalidTaskID stores, as any publisher on the dead-letter
// subjects could, a record whose task ID no jetflow record carries (a
// wildcard token, a space): its replay is refused with an error and the
// record stays, rather than enqueueing a task under that ID.
func TestReplayRefusesInvalidTaskID(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for _, id := range []string{"a.>", "two words"} {
		ack, err := e.JS.PublishMsg(ctx, forgedRecord("acct.refund", id, []byte(`{}`)))
		if err != nil {
			t.Fatal(err)
		}
		q := dlq.New(e.Client)
		if info, err := q.Replay(ctx, ack.Sequence); err == nil {
			t.Errorf("Replay of a record with task ID %q = %+v, want an error", id, info)
		}
		if _, err := q.Get(ctx, ack.Sequence); err != nil {
			t.Errorf("record with task ID %q after the refused replay: %v", id, err)
		}
	}
}
