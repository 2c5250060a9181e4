package deadletter

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// storeTask stores a task on subject and returns its sequence.
func storeTask(t *testing.T, js jetstream.JetStream, subject, id string, h nats.Header, payload string) uint64 {
	t.Helper()
	if h == nil {
		h = nats.Header{}
	}
	h.Set(taskmsg.HeaderTaskID, id)
	h.Set(jetstream.MsgIDHeader, id) // as a client enqueues it
	ack, err := js.PublishMsg(t.Context(), &nats.Msg{Subject: subject, Header: h, Data: []byte(payload)})
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// The record a worker writes carries the task's payload and custom
// headers, the record's own headers, and none of the task's "Nats-"
// headers or forged copies of the record's.
func TestWriteFromWorkerRecord(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	seq := storeTask(t, js, "jetflow.task.high.payments.charge", "t1", nil, `{"amount":1}`)
	// The headers as a worker read them: a producer's, hostile ones too.
	h := nats.Header{"X-Tenant": {"acme"}, "Nats-Rollup": {"all"}, HeaderReason: {"forged"}, HeaderDeadCount: {"2"},
		taskmsg.HeaderTaskID: {"t1"}}
	a := Attempt{Seq: seq, Subject: "jetflow.task.high.payments.charge", Header: h, Payload: []byte(`{"amount":1}`),
		ID: "t1", Type: "payments.charge", Priority: "high", Attempt: 1, Cause: errors.New("card\ndeclined")}
	if err := c.WriteFromWorker(t.Context(), a, ReasonPermanent, discard()); err != nil {
		t.Fatal(err)
	}
	recs := records(t, js)
	if len(recs) != 1 {
		t.Fatalf("%d records; want 1", len(recs))
	}
	r := recs[0]
	want := map[string]string{
		HeaderType: "payments.charge", HeaderPriority: "high", HeaderReason: ReasonPermanent,
		HeaderOriginalSubject: "jetflow.task.high.payments.charge", HeaderOriginalSeq: strconv.FormatUint(seq, 10),
		HeaderDeliveries: "1", HeaderLastError: "card declined", HeaderLastErrorAttempt: "1",
		HeaderDeadCount: "3", HeaderRoutedBy: routedByWorker, taskmsg.HeaderTaskID: "t1", "X-Tenant": "acme",
		jetstream.MsgIDHeader: "dlq-JETFLOW_TASKS-" + strconv.FormatUint(seq, 10),
	}
	for k, v := range want {
		if got := r.Header.Get(k); got != v {
			t.Errorf("%s = %q; want %q", k, got, v)
		}
	}
	if got := r.Header.Get("Nats-Rollup"); got != "" {
		t.Errorf("the task's Nats-Rollup header was copied: %q", got)
	}
	if r.Subject != "jetflow.dlq.payments.charge" || string(r.Data) != `{"amount":1}` {
		t.Errorf("record on %s with %q", r.Subject, r.Data)
	}
	if r.Header.Get(HeaderFirstFailure) == "" || r.Header.Get(HeaderDeadAt) == "" {
		t.Error("failure or death time missing")
	}
}

// A dead count a producer set to the largest int does not wrap.
func TestRecordDeadCountDoesNotWrap(t *testing.T) {
	t.Parallel()
	c, _ := newCore(t)
	cases := map[string]string{"": "1", "0": "1", "-5": "1", "junk": "1", "4": "5",
		strconv.Itoa(int(^uint(0) >> 1)): strconv.Itoa(int(^uint(0) >> 1))}
	for in, want := range cases {
		m := c.recordMsg(deadSource{taskType: "a", header: nats.Header{HeaderDeadCount: {in}}})
		if got := m.Header.Get(HeaderDeadCount); got != want {
			t.Errorf("dead count after %q = %q; want %q", in, got, want)
		}
		if m.Header.Get(jetstream.MsgIDHeader) != "" {
			t.Error("a record of a task not read from a stream has a deduplication ID")
		}
	}
}

// A record larger than the server's max payload first loses most of its
// error text, then, if that is not enough, its payload, which it says.
func TestRecordFitsMaxPayload(t *testing.T) {
	t.Parallel()
	c, js := newCore(t, func(o *server.Options) { o.MaxPayload = 8 << 10 })
	cases := []struct {
		name        string
		payload     int
		wantOmitted bool
	}{
		{"a shorter error is enough", 7000, false},
		{"the payload goes", 7900, true},
	}
	for i, tc := range cases {
		payload := strings.Repeat("p", tc.payload)
		a := Attempt{Subject: "jetflow.task.normal.a", Payload: []byte(payload), ID: "t-big", Type: "a", Priority: "normal",
			Attempt: 1, Cause: errors.New(strings.Repeat("e", 4000))}
		if err := c.WriteFromWorker(t.Context(), a, ReasonPermanent, discard()); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		r := records(t, js)[i]
		omitted := r.Header.Get(HeaderPayloadOmitted)
		if tc.wantOmitted != (omitted == strconv.Itoa(len(payload))) || tc.wantOmitted != (len(r.Data) == 0) {
			t.Errorf("%s: %s = %q with %d payload bytes", tc.name, HeaderPayloadOmitted, omitted, len(r.Data))
		}
		if e := r.Header.Get(HeaderLastError); len(e) > 128 || e == "" {
			t.Errorf("%s: last error of %d bytes; want 1..128", tc.name, len(e))
		}
	}
}

// Failed attempts recorded in the errors bucket give a later record its
// first and last failure; keys written for another task ID at the same
// sequence are ignored.
func TestRecordFailureHistory(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	seq := storeTask(t, js, "jetflow.task.normal.a", "t2", nil, "x")
	base := Attempt{Seq: seq, Subject: "jetflow.task.normal.a", ID: "t2", Type: "a", Priority: "normal"}
	for i, msg := range []string{"first boom", "second boom"} {
		a := base
		a.Attempt, a.Cause = i+1, errors.New(msg)
		c.RecordFailure(a)
	}
	c.RecordFailure(Attempt{Seq: 0, ID: "t2", Cause: errors.New("ignored: no sequence")})
	c.RecordFailure(Attempt{Seq: seq, ID: "t2"}) // no cause: ignored
	waitFor(t, "the last failure recorded", func() bool {
		f, ok, err := c.LastFailure(t.Context(), seq, "t2")
		return err == nil && ok && f.Attempt == 2
	})
	h, err := c.history(t.Context(), seq, "t2")
	if err != nil {
		t.Fatal(err)
	}
	if h.first == nil || h.first.Error != "first boom" || h.last.Error != "second boom" {
		t.Fatalf("history first %+v last %+v", h.first, h.last)
	}
	if _, ok, err := c.LastFailure(t.Context(), seq, "another-task"); ok || err != nil {
		t.Errorf("LastFailure of another task ID at the same sequence = %v, %v", ok, err)
	}

	a := base
	a.Attempt, a.Cause = 3, errors.New("third boom")
	if err := c.WriteFromWorker(t.Context(), a, ReasonPermanent, discard()); err != nil {
		t.Fatal(err)
	}
	r := records(t, js)[0]
	if r.Header.Get(HeaderFirstFailure) == r.Header.Get(HeaderLastFailure) {
		t.Error("first failure taken from this attempt, not from the errors bucket")
	}
	if got := r.Header.Get(HeaderLastError); got != "third boom" {
		t.Errorf("last error %q; want the attempt's own", got)
	}
}

// A redelivered task whose record an earlier delivery wrote (its
// termination was lost) gets no second record, even past the duplicate
// window; a "dead" mark naming a record that is not the task's counts for
// nothing.
func TestWriteFromWorkerOnce(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	seq := storeTask(t, js, "jetflow.task.normal.a", "t3", nil, "x")
	a := Attempt{Seq: seq, Subject: "jetflow.task.normal.a", ID: "t3", Type: "a", Priority: "normal", Attempt: 2, Cause: errors.New("boom")}
	if err := c.WriteFromWorker(t.Context(), a, ReasonPermanent, discard()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead mark", func() bool {
		h, err := c.history(t.Context(), seq, "t3")
		return err == nil && h.dead
	})
	// Past the stream's duplicate window, only the mark keeps a second
	// record out.
	dls, err := js.Stream(t.Context(), testTopo.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := dls.CachedInfo().Config
	cfg.Duplicates = 100 * time.Millisecond
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	written := records(t, js)[0].Time
	waitFor(t, "the duplicate window to pass", func() bool { return time.Since(written) > 500*time.Millisecond })
	a.Attempt = 3
	if err := c.WriteFromWorker(t.Context(), a, ReasonPermanent, discard()); err != nil {
		t.Fatal(err)
	}
	info, err := dls.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != 1 {
		t.Errorf("dead-letter stream at sequence %d; want 1 (no second publish)", info.State.LastSeq)
	}

	// A forged mark: the record it names belongs to another task.
	other := storeTask(t, js, "jetflow.task.normal.a", "t4", nil, "y")
	c.markDead(other, "t4", 1)
	waitFor(t, "the forged mark stored", func() bool {
		_, err := js.Stream(t.Context(), "KV_"+testTopo.ErrorsBucket)
		if err != nil {
			return false
		}
		kv, err := js.KeyValue(t.Context(), testTopo.ErrorsBucket)
		if err != nil {
			return false
		}
		_, err = kv.Get(t.Context(), strconv.FormatUint(other, 10)+".dead")
		return err == nil
	})
	h, err := c.history(t.Context(), other, "t4")
	if err != nil {
		t.Fatal(err)
	}
	if h.dead {
		t.Error("a dead mark naming another task's record was believed")
	}
}

func TestDeleteMsg(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	seq := storeTask(t, js, "jetflow.task.normal.a", "t5", nil, "x")
	gone, err := c.DeleteMsg(t.Context(), testTopo.TaskStream, seq)
	if err != nil || !gone {
		t.Fatalf("first delete = %v, %v; want true, nil", gone, err)
	}
	gone, err = c.DeleteMsg(t.Context(), testTopo.TaskStream, seq)
	if err != nil || gone {
		t.Errorf("second delete = %v, %v; want false, nil", gone, err)
	}
	if _, err := c.DeleteMsg(t.Context(), "NO_SUCH_STREAM", 1); !errors.Is(err, natserr.ErrTopologyMissing) {
		t.Errorf("delete from a missing stream: %v; want ErrTopologyMissing", err)
	}
}

// Prepare and Stream report a missing stream as missing topology; a record
// published where no stream listens is too.
func TestMissingTopology(t *testing.T) {
	t.Parallel()
	nc := startServer(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	c := NewCore(nc, js, testTopo, discard())
	if err := c.Prepare(t.Context(), time.Hour); !errors.Is(err, natserr.ErrTopologyMissing) {
		t.Errorf("Prepare without streams: %v; want ErrTopologyMissing", err)
	}
	a := Attempt{Subject: "jetflow.task.normal.a", ID: "t6", Type: "a", Priority: "normal", Attempt: 1, Cause: errors.New("boom")}
	if err := c.WriteFromWorker(t.Context(), a, ReasonPermanent, discard()); !errors.Is(err, natserr.ErrTopologyMissing) {
		t.Errorf("WriteFromWorker without a dead-letter stream: %v; want ErrTopologyMissing", err)
	}
	if c.Topology().TaskStream != testTopo.TaskStream {
		t.Error("Topology does not return the core's topology")
	}
}

// A record that lands in another stream than the dead-letter stream is an
// error: the streams' subjects overlap wrongly.
func TestRecordInWrongStream(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	topo := testTopo
	topo.DLQSubject = func(string) string { return "jetflow.task.normal.wrong" }
	wrong := NewCore(c.nc, js, topo, discard())
	a := Attempt{Subject: "jetflow.task.normal.a", ID: "t7", Type: "a", Priority: "normal", Attempt: 1, Cause: errors.New("boom")}
	err := wrong.WriteFromWorker(t.Context(), a, ReasonPermanent, discard())
	if err == nil || !strings.Contains(err.Error(), "not "+testTopo.DLQStream) {
		t.Errorf("record stored in the task stream: err = %v", err)
	}
}

// Stranded, rejected and conflicting messages get records with their
// reasons; the record of a message of another stream is deduplicated by
// that stream's name.
func TestRefusedRecords(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	a := Attempt{Seq: 7, Subject: "jetflow.task.normal.a", ID: "t8", Type: "a", Priority: "normal", Attempt: 1, Cause: errors.New("why")}
	if err := c.WriteStranded(t.Context(), a); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRejected(t.Context(), "JETFLOW_DELAYS", a); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteConflict(t.Context(), "JETFLOW_DELAYS2", a); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRejected(t.Context(), "JETFLOW_DELAYS", a); err != nil { // a retry: deduplicated
		t.Fatal(err)
	}
	recs := records(t, js)
	if len(recs) != 3 {
		t.Fatalf("%d records; want 3", len(recs))
	}
	want := []struct{ reason, by, id string }{
		{ReasonStranded, routedByOperator, "dlq-JETFLOW_TASKS-7"},
		{ReasonInvalid, routedByWorker, "dlq-JETFLOW_DELAYS-7"},
		{ReasonConflict, routedByWorker, "dlq-JETFLOW_DELAYS2-7"},
	}
	for i, w := range want {
		h := recs[i].Header
		if h.Get(HeaderReason) != w.reason || h.Get(HeaderRoutedBy) != w.by || h.Get(jetstream.MsgIDHeader) != w.id {
			t.Errorf("record %d: reason %q by %q id %q; want %+v", i, h.Get(HeaderReason), h.Get(HeaderRoutedBy),
				h.Get(jetstream.MsgIDHeader), w)
		}
	}
}
