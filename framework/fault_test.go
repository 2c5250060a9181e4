package framework

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/intake"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// fakeMsg is a delivered message built from fuzz input. Only the accessors
// the worker reads before a handler runs are meaningful.
type fakeMsg struct {
	jetstream.Msg // nil: acking panics, which the fuzz target must never do
	data          []byte
	hdr           nats.Header
	md            *jetstream.MsgMetadata
}

func (m *fakeMsg) Data() []byte         { return m.data }
func (m *fakeMsg) Headers() nats.Header { return m.hdr }
func (m *fakeMsg) Subject() string      { return "jetflow.task.normal.fuzz.task" }
func (m *fakeMsg) Metadata() (*jetstream.MsgMetadata, error) {
	if m.md == nil {
		return nil, jetstream.ErrNotJSMessage
	}
	return m.md, nil
}

type fuzzPayload struct {
	Name  string         `json:"name"`
	N     int            `json:"n"`
	Items []string       `json:"items"`
	Extra map[string]any `json:"extra"`
}

// FuzzTaskDecoding feeds corrupt headers, metadata and payloads through the
// path a delivered message takes before its handler runs: newTask, the
// ID and due-time checks and payload decoding. Nothing may panic; a payload that
// cannot be decoded must give a *DecodeError (which typed handlers turn into
// a permanent failure), and a due time that cannot be trusted a permanent
// error wrapping ErrCorruptTask.
func FuzzTaskDecoding(f *testing.F) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	f.Add("id1", "", "", "", "", []byte(`{"name":"a","n":1}`), uint64(1), int64(0), true)
	f.Add("", "msgid", now.Format(time.RFC3339Nano), now.Add(time.Second).Format(time.RFC3339Nano), "json", []byte(`null`), uint64(3), int64(0), true)
	f.Add("", "", "yesterday", "tomorrow", "raw", []byte("\xff\x00"), uint64(0), int64(-1), false)
	f.Add("x", "y", "", "9999-12-31T23:59:59.999999999Z", "gob", []byte(`{"n":"not a number"}`), uint64(1<<63), int64(1)<<62, true)
	f.Add("x", "", "", "0001-01-01T00:00:00Z", "", []byte(`{"items":[1,2],"extra":{"a":[{}]}}`), uint64(2), int64(0), true)
	f.Add(strings.Repeat("i", 300), "", "", "2026-01-02T03:04:05+25:00", "", []byte(`[[[[[[[[[[`), uint64(1), int64(0), true)
	f.Fuzz(func(t *testing.T, id, msgID, enqueuedAt, scheduledFor, encoding string, payload []byte, delivered uint64, tsOffset int64, hasMeta bool) {
		hdr := nats.Header{}
		set := func(k, v string) {
			if v != "" {
				hdr.Set(k, v)
			}
		}
		set(HeaderTaskID, id)
		set(jetstream.MsgIDHeader, msgID)
		set(HeaderEnqueuedAt, enqueuedAt)
		set(HeaderScheduledFor, scheduledFor)
		set(HeaderEncoding, encoding)
		msg := &fakeMsg{data: payload, hdr: hdr}
		if hasMeta {
			msg.md = &jetstream.MsgMetadata{
				Sequence:     jetstream.SequencePair{Stream: delivered ^ 0x5555, Consumer: delivered},
				NumDelivered: delivered,
				Timestamp:    now.Add(time.Duration(tsOffset)),
			}
		}
		w := &Worker{names: streams.MustNames(""), log: slog.New(slog.DiscardHandler)}
		w.in = intake.New(intake.Config[*typeRunner, taskState]{Names: w.names}) // one partition
		cfg, err := newHandlerConfig(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		tt := &typeRunner{name: "fuzz.task", cfg: cfg}
		w.addType(tt)
		p := &pending{Type: &tt.in, Msg: msg}
		task := w.newTask(p)
		if err := streams.ValidateID(task.ID); err != nil {
			t.Fatalf("task ID %q from the wire is not a valid ID: %v", task.ID, err)
		}
		_ = task.Logger()

		if err := checkDelivered(task, msg); err != nil {
			if !IsPermanent(err) || !errors.Is(err, ErrCorruptTask) || err.Error() == "" || len(err.Error()) > 1024 {
				t.Fatalf("wire check error %v is not a short permanent ErrCorruptTask", err)
			}
		}

		for _, v := range []any{new(fuzzPayload), new(map[string]any), new(any), new([]byte), new(int)} {
			err := decodePayload(JSONCodec(), task, v)
			if err == nil {
				continue
			}
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, ErrDecode) || err.Error() == "" {
				t.Fatalf("decode into %T: %v (%T) is not a *DecodeError", v, err, err)
			}
		}
	})
}

// TestCorruptMessagesFailPermanently publishes hand-made task messages with
// corrupt headers and payloads straight to a work subject. The worker must
// keep running, fail each one permanently with a reason that says what is
// wrong, and still run a valid task afterwards.
func TestCorruptMessagesFailPermanently(t *testing.T) {
	t.Parallel()
	srv := testutil.RunServer(t)
	_, js := testutil.JetStream(t, srv)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	const typ = "fault.corrupt"
	subject := streams.MustNames("").TaskSubject(PriorityNormal, typ)

	var mu sync.Mutex
	failed := make(map[string]error)
	failedCh := make(chan string, 16)
	okCh := make(chan string, 16)
	w, err := NewWorker(testutil.Connect(t, srv), WithHooks(Hooks{
		Finished: func(_ context.Context, task *Task, o Outcome) {
			if o.Action != ActionFail {
				return
			}
			mu.Lock()
			failed[task.ID] = o.Err
			mu.Unlock()
			failedCh <- task.ID
		},
	}))
	if err != nil {
		t.Fatal(err)
	}
	Handle(w, typ, func(ctx context.Context, task *Task, p fuzzPayload) error {
		okCh <- task.ID
		return nil
	}, WithMaxAttempts(3))
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = w.Shutdown(sctx)
	}()

	cases := []struct {
		id      string
		hdr     map[string]string
		payload string
		want    error
		reason  string
	}{
		{"bad-json", nil, `{"name":`, ErrDecode, "unexpected end of JSON"},
		{"wrong-type", nil, `{"n":"seven"}`, ErrDecode, "cannot unmarshal"},
		{"other-codec", map[string]string{HeaderEncoding: "msgpack"}, `x`, ErrDecode, `codec "msgpack"`},
		{"bad-due", map[string]string{HeaderScheduledFor: "next tuesday"}, `{}`, ErrCorruptTask, "not an RFC 3339 time"},
		{"far-due", map[string]string{HeaderScheduledFor: "9999-12-31T00:00:00Z"}, `{}`, ErrCorruptTask, "never fires that early"},
	}
	for _, c := range cases {
		m := nats.NewMsg(subject)
		m.Data = []byte(c.payload)
		m.Header.Set(HeaderTaskID, c.id)
		m.Header.Set(jetstream.MsgIDHeader, c.id)
		for k, v := range c.hdr {
			m.Header.Set(k, v)
		}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	for range cases {
		testutil.Recv(t, failedCh, 30*time.Second, "corrupt task failed")
	}
	// A garbage enqueued-at header is informational only: the task runs.
	m := nats.NewMsg(subject)
	m.Data, _ = json.Marshal(fuzzPayload{Name: "fine"})
	m.Header.Set(HeaderTaskID, "valid")
	m.Header.Set(jetstream.MsgIDHeader, "valid")
	m.Header.Set(HeaderEnqueuedAt, "garbage")
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	if id := testutil.Recv(t, okCh, 30*time.Second, "valid task after corrupt ones"); id != "valid" {
		t.Fatalf("ran %q", id)
	}

	// The handler reports before it returns; the ack and the counters follow.
	testutil.Wait(t, 30*time.Second, "the valid task acked", func() bool { return w.Stats().Succeeded == 1 })

	mu.Lock()
	defer mu.Unlock()
	for _, c := range cases {
		err := failed[c.id]
		if !IsPermanent(err) || !errors.Is(err, c.want) || !strings.Contains(err.Error(), c.reason) {
			t.Errorf("%s: failed with %v, want a permanent %v mentioning %q", c.id, err, c.want, c.reason)
		}
	}
	if st := w.Stats(); st.Started != 4 || st.Failed != uint64(len(cases)) || st.Succeeded != 1 {
		// bad-json, wrong-type, other-codec and valid reach the handler
		// wrapper; the corrupt due times fail before it.
		t.Errorf("stats %+v", st)
	}
}
