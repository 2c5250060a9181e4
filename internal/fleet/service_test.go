package fleet_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/testutil"
)

// A service creates the registry bucket, writes its record with what Now
// sets on a copy of Self, and deletes it when its context ends.
func TestServiceRun(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	_, js := testutil.JetStream(t, s)
	const bucket = "JETFLOW_WORKERS"
	self := record("w1")
	self.Busy = 0
	var nows sync.WaitGroup
	nows.Add(1)
	var once sync.Once
	svc := &fleet.Service{JS: js, Bucket: bucket, TaskStream: "JETFLOW_TASKS", Interval: time.Second, Rules: rules,
		Log: slog.New(slog.DiscardHandler), Self: self,
		Now: func(rec *fleet.Record) {
			rec.Busy = 2
			once.Do(nows.Done)
		}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	l := waitList(t, js, bucket, func(l *fleet.Listing) bool { return len(l.Records) == 1 })
	if got := l.Records[0]; got.ID != "w1" || got.Busy != 2 || got.Host != "h1" || got.TTLSeconds != 3 {
		t.Errorf("record %+v", got)
	}
	nows.Wait()
	if svc.Self.Busy != 0 {
		t.Errorf("Now changed Self: busy %d", svc.Self.Busy)
	}
	cancel()
	<-done
	l, err := rules.List(t.Context(), js, bucket)
	if err != nil || len(l.Records) != 0 {
		t.Errorf("after the service stopped: %+v, %v", l, err)
	}
}

// A service whose bucket cannot be ensured (no JetStream) warns and stops
// with its context.
func TestServiceWarnsWithoutBucket(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	nc, js := testutil.JetStream(t, s)
	nc.Close()
	var logs testutil.LogBuffer
	svc := &fleet.Service{JS: js, Bucket: "JETFLOW_WORKERS", TaskStream: "JETFLOW_TASKS", Interval: time.Second, Rules: rules,
		Log: slog.New(slog.NewTextHandler(&logs, nil)), Self: record("w1"), Now: func(*fleet.Record) {}}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); svc.Run(ctx) }()
	deadline := time.After(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !strings.Contains(logs.String(), "bucket not ensured") {
		select {
		case <-deadline:
			t.Fatalf("no warning; logs: %s", logs.String())
		case <-tick.C:
		}
	}
	cancel()
	<-done
}

func TestHostname(t *testing.T) {
	t.Parallel()
	if h := fleet.Hostname(); h == "" || len(h) > fleet.MaxTextLen {
		t.Errorf("Hostname = %q", h)
	}
}

// A watching gate reads the registry, and reports a registry it cannot
// read to its log.
func TestGateWatch(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	_, js := testutil.JetStream(t, s)
	var logs testutil.LogBuffer
	var g fleet.Gate
	g.Grace, g.Interval = time.Minute, time.Second
	g.Watch(t.Context(), js, "JETFLOW_WORKERS", rules, slog.New(slog.NewTextHandler(&logs, nil)))
	if _, err := g.List(); !errors.Is(err, fleet.ErrNoRegistry) {
		t.Fatalf("List without a registry: %v", err)
	}
	h := nats.Header{fleet.HeaderPayloadVersion: {"2"}}
	if v, _, _ := g.Check([]int{1}, "mail.send", h, time.Now()); v != fleet.Back {
		t.Errorf("verdict %v, want Back", v)
	}
	if out := logs.String(); !strings.Contains(out, "could not read the worker registry") || !strings.Contains(out, "task_type=mail.send") {
		t.Errorf("logs: %s", out)
	}
	if err := fleet.EnsureBucket(t.Context(), js, "JETFLOW_WORKERS", "JETFLOW_TASKS"); err != nil {
		t.Fatal(err)
	}
	if l, err := g.List(); err != nil || len(l.Records) != 0 {
		t.Errorf("List = %+v, %v", l, err)
	}
}

// HandBackTask refuses what cannot fire from a schedule and stores the
// rest.
func TestHandBackTask(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	_, js := testutil.JetStream(t, s)
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SCHED", Subjects: []string{"sched.>", "task.>"},
		AllowMsgSchedules: true}); err != nil {
		t.Fatal(err)
	}
	b := func(id string) *taskmsg.HandBack {
		return &taskmsg.HandBack{Subject: "sched." + id, Target: "task.t", ID: id, Sequence: 1,
			Due: time.Now().Add(time.Hour), Header: nats.Header{}, Data: []byte("{}"), Since: time.Now(), Refusals: 1}
	}
	if err := fleet.HandBackTask(ctx, js, "SCHED", true, b("t1")); err == nil || !strings.Contains(err.Error(), "ordered") {
		t.Errorf("ordered task: %v", err)
	}
	if err := fleet.HandBackTask(ctx, js, "SCHED", false, b("cron-x")); err == nil || !strings.Contains(err.Error(), "cron-x") {
		t.Errorf("cron tick: %v", err)
	}
	if err := fleet.HandBackTask(ctx, js, "SCHED", false, b("t1")); err != nil {
		t.Fatal(err)
	}
	if err := fleet.HandBackTask(ctx, js, "SCHED", false, b("t1")); !errors.Is(err, fleet.ErrPendingSchedule) {
		t.Errorf("second hand-back: %v, want ErrPendingSchedule", err)
	}
}
