package versiongate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/intake"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/versiongate"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

var (
	errCorrupt  = errors.New("corrupt task")
	errNoWorker = errors.New("no worker accepts the version")
)

// taskType is a registered type as the worker keeps it: the versions its
// handler accepts and whether it is ordered.
type taskType struct {
	accepted []int
	ordered  bool
}

// part is the worker's part of a pending task: its ID.
type part struct{ id string }

type pending = intake.Pending[*taskType, part]

// msg is a delivery that records its settlement; ackErr and nakErr fail
// Ack and NakWithDelay.
type msg struct {
	jetstream.Msg
	header         nats.Header
	ops            []string
	nakDelay       time.Duration
	ackErr, nakErr error
}

func (m *msg) Headers() nats.Header { return m.header }
func (m *msg) Data() []byte         { return []byte(`{"to":"a@b"}`) }
func (m *msg) Ack() error           { m.ops = append(m.ops, "ack"); return m.ackErr }
func (m *msg) NakWithDelay(d time.Duration) error {
	m.ops = append(m.ops, "nak")
	m.nakDelay = d
	return m.nakErr
}

// harness is a gate and what it did.
type harness struct {
	gate      *versiongate.Gate[*taskType, part]
	logs      bytes.Buffer
	failed    []error
	ackFailed []string
}

// newHarness returns a gate whose registry lists one worker that accepts
// version 5 of mail.send, with a grace of an hour; js may be nil for tests
// that store no hand-back.
func newHarness(js jetstream.JetStream) *harness {
	h := &harness{gate: new(versiongate.Gate[*taskType, part])}
	g := h.gate
	log := slog.New(slog.NewTextHandler(&h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g.Grace, g.Interval = time.Hour, time.Hour
	g.List = func() (*fleet.Listing, error) {
		return &fleet.Listing{Records: []fleet.Record{{ID: "w2", Types: []fleet.Serves{{Type: "mail.send", Versions: []int{5}}}}}}, nil
	}
	g.Ctx, g.JS, g.Names = context.Background(), js, streams.MustNames("jetflow")
	g.ErrCorrupt, g.ErrNoWorker = errCorrupt, errNoWorker
	g.Accepted = func(p *pending) []int { return p.Type.Ext.accepted }
	g.Task = func(p *pending) versiongate.Task {
		return versiongate.Task{ID: p.X.id, Sequence: 42, EnqueuedAt: time.Unix(1700000000, 0), Ordered: p.Type.Ext.ordered, Log: log}
	}
	g.Fail = func(_ *pending, err error) { h.failed = append(h.failed, err) }
	g.AckFailed = func(_ *pending, op string, _ error) { h.ackFailed = append(h.ackFailed, op) }
	return h
}

// task returns a pending task of mail.send of type tt with the headers kv.
func task(tt *taskType, kv ...string) (*pending, *msg) {
	m := &msg{header: nats.Header{}}
	for i := 0; i < len(kv); i += 2 {
		m.header.Set(kv[i], kv[i+1])
	}
	return &pending{Type: &intake.Type[*taskType]{Spec: intake.Spec{Name: "mail.send"}, Ext: tt},
		Prio: streams.PriorityHigh, Msg: m, X: part{id: "t1"}}, m
}

// TestRefuseVerdicts: each verdict's action on a task that does not reach
// the schedule stream: run, fail for good with the verdict's sentinel, or
// redeliver with the hand-back's delay when the task cannot fire from a
// schedule; a task settled already is left alone.
func TestRefuseVerdicts(t *testing.T) {
	t.Parallel()
	old := taskmsg.FormatTime(time.Now().Add(-2 * time.Hour))
	tests := []struct {
		name      string
		tt        taskType
		headers   []string
		claimed   bool
		nakErr    error
		refused   bool
		fail      error
		ops       []string
		nakDelay  time.Duration
		redeliv   uint64
		ackFailed []string
		log       string
	}{
		{name: "no versions declared", tt: taskType{}, headers: []string{fleet.HeaderPayloadVersion, "9"}},
		{name: "no version header is 1", tt: taskType{accepted: []int{1, 2}}},
		{name: "accepted", tt: taskType{accepted: []int{1, 2}}, headers: []string{fleet.HeaderPayloadVersion, "2"}},
		{name: "corrupt header", tt: taskType{accepted: []int{1}}, headers: []string{fleet.HeaderPayloadVersion, "02"},
			refused: true, fail: errCorrupt},
		{name: "nobody accepts it past the grace", tt: taskType{accepted: []int{1}},
			headers: []string{fleet.HeaderPayloadVersion, "3", taskmsg.HeaderVersionRefusedSince, old},
			refused: true, fail: errNoWorker},
		{name: "ordered: redelivered", tt: taskType{accepted: []int{1}, ordered: true},
			headers: []string{fleet.HeaderPayloadVersion, "3", taskmsg.HeaderVersionRefusals, "2"},
			refused: true, ops: []string{"nak"}, nakDelay: 4 * fleet.RetryBase, redeliv: 1,
			log: `level=WARN msg="jetflow could not hand back a task of a payload version its handler does not accept; redelivering it, which spends an attempt" version=3 error="an ordered task stays in its key's queue"`},
		{name: "served elsewhere, ordered: redelivered soon", tt: taskType{accepted: []int{1}, ordered: true},
			headers: []string{fleet.HeaderPayloadVersion, "5"},
			refused: true, ops: []string{"nak"}, nakDelay: fleet.RetryServed, redeliv: 1, log: "version=5"},
		{name: "redelivery's nak not sent", tt: taskType{accepted: []int{1}, ordered: true},
			headers: []string{fleet.HeaderPayloadVersion, "3"}, nakErr: errors.New("closed"),
			refused: true, ops: []string{"nak"}, nakDelay: fleet.RetryBase, redeliv: 1, ackFailed: []string{"nak"}, log: "version=3"},
		{name: "settled already", tt: taskType{accepted: []int{1}, ordered: true},
			headers: []string{fleet.HeaderPayloadVersion, "3"}, claimed: true, refused: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(nil)
			p, m := task(&tc.tt, tc.headers...)
			m.nakErr = tc.nakErr
			if tc.claimed {
				p.Claim()
			}
			if got := h.gate.Refuse(p); got != tc.refused {
				t.Errorf("Refuse = %v, want %v", got, tc.refused)
			}
			if tc.fail == nil && len(h.failed) > 0 || tc.fail != nil && (len(h.failed) != 1 || !errors.Is(h.failed[0], tc.fail)) {
				t.Errorf("failed with %v, want %v", h.failed, tc.fail)
			}
			if !slices.Equal(m.ops, tc.ops) || m.nakDelay != tc.nakDelay {
				t.Errorf("message operations %v (nak delay %v), want %v (%v)", m.ops, m.nakDelay, tc.ops, tc.nakDelay)
			}
			if n := h.gate.Redelivered.Load(); n != tc.redeliv || h.gate.Back.Load() != 0 {
				t.Errorf("Redelivered %d, Back %d; want %d, 0", n, h.gate.Back.Load(), tc.redeliv)
			}
			if !slices.Equal(h.ackFailed, tc.ackFailed) {
				t.Errorf("AckFailed %v, want %v", h.ackFailed, tc.ackFailed)
			}
			if !strings.Contains(h.logs.String(), tc.log) || tc.log == "" && h.logs.Len() > 0 {
				t.Errorf("logs:\n%s\nwant %q", h.logs.String(), tc.log)
			}
			if tc.redeliv == 0 && !tc.claimed && !p.Claim() {
				t.Error("the gate claimed a task it did not settle")
			}
		})
	}
}

// TestRefuseHandsBack: a version nobody accepts, within the grace, is
// stored as a one-shot schedule of the task with the hand-back headers and
// its delivery acknowledged, counted and logged; a second delivery of the
// task while the schedule is pending is redelivered instead; an Ack that is
// not sent is reported.
func TestRefuseHandsBack(t *testing.T) {
	t.Parallel()
	env := testutil.NewEnv(t, streams.Config{})
	h := newHarness(env.JS)
	tt := &taskType{accepted: []int{1, 2}}
	since := time.Now().Add(-time.Minute).Truncate(time.Second)
	p, m := task(tt, fleet.HeaderPayloadVersion, "3", taskmsg.HeaderVersionRefusals, "9",
		taskmsg.HeaderVersionRefusedSince, taskmsg.FormatTime(since))
	m.ackErr = errors.New("closed")
	start := time.Now()
	if !h.gate.Refuse(p) {
		t.Fatal("Refuse = false for an unaccepted version")
	}
	if !slices.Equal(m.ops, []string{"ack"}) || h.gate.Back.Load() != 1 || h.gate.Redelivered.Load() != 0 {
		t.Fatalf("operations %v, Back %d, Redelivered %d; want [ack], 1, 0", m.ops, h.gate.Back.Load(), h.gate.Redelivered.Load())
	}
	if !slices.Equal(h.ackFailed, []string{"ack"}) {
		t.Errorf("AckFailed %v, want [ack]", h.ackFailed)
	}
	if want := `level=DEBUG msg="jetflow task handed back: payload version not accepted" version=3 retry_in=30s`; !strings.Contains(h.logs.String(), want) {
		t.Errorf("logs:\n%s\nwant %q", h.logs.String(), want)
	}
	if p.Claim() {
		t.Error("the task was not claimed")
	}

	names := streams.MustNames("jetflow")
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s, err := env.JS.Stream(ctx, names.ScheduleStream())
	if err != nil {
		t.Fatal(err)
	}
	stored, err := s.GetLastMsgForSubject(ctx, names.ScheduleSubject("t1"))
	if err != nil {
		t.Fatalf("no schedule of the task: %v", err)
	}
	hd := stored.Header
	if got := hd.Get(taskmsg.HeaderVersionRefusals); got != "10" {
		t.Errorf("refusals header %q, want 10", got)
	}
	if got := taskmsg.ParseTime(hd.Get(taskmsg.HeaderVersionRefusedSince)); !got.Equal(since) {
		t.Errorf("refused-since header %v, want %v", got, since)
	}
	if got := hd.Get(fleet.HeaderPayloadVersion); got != "3" || string(stored.Data) != `{"to":"a@b"}` {
		t.Errorf("schedule carries version %q and payload %s", got, stored.Data)
	}
	if got := hd.Get("Nats-Schedule-Target"); got != names.FiredSubject(streams.PriorityHigh, "mail.send") {
		t.Errorf("schedule target %q", got)
	}
	due, err := time.Parse(time.RFC3339, strings.TrimPrefix(hd.Get("Nats-Schedule"), "@at "))
	if err != nil || due.Before(start.Add(fleet.RetryMax).Truncate(time.Second)) || due.After(time.Now().Add(fleet.RetryMax+time.Second)) {
		t.Errorf("schedule due %q (%v), want in %v", hd.Get("Nats-Schedule"), err, fleet.RetryMax)
	}

	// Delivered again (another message of the task) while its schedule is pending.
	again, m2 := task(tt, fleet.HeaderPayloadVersion, "3")
	again.X.id = "t1"
	if !h.gate.Refuse(again) || !slices.Equal(m2.ops, []string{"nak"}) || h.gate.Redelivered.Load() != 1 {
		t.Errorf("second delivery: operations %v, Redelivered %d; want [nak], 1", m2.ops, h.gate.Redelivered.Load())
	}
}
