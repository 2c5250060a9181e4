package deadletter

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The tests of this package start their server by hand: testutil imports
// this package (through streams), so it cannot be imported here.

// testTopo is a topology like the default one: work subjects
// "jetflow.task.<prio>.<type>", each read by the consumer
// "task-<prio>-<type with _ for .>".
var testTopo = Topology{
	TaskStream:     "JETFLOW_TASKS",
	DLQStream:      "JETFLOW_DLQ",
	AdvisoryStream: "JETFLOW_ADVISORIES",
	ErrorsBucket:   "JETFLOW_ERRORS",
	TaskWildcard:   "jetflow.task.>",
	DLQSubject:     func(taskType string) string { return "jetflow.dlq." + taskType },
	Work: func(subject string) (string, string, string, bool) {
		rest, ok := strings.CutPrefix(subject, "jetflow.task.")
		if !ok {
			return "", "", "", false
		}
		prio, typ, ok := strings.Cut(rest, ".")
		if !ok || typ == "" {
			return "", "", "", false
		}
		return typ, prio, "task-" + prio + "-" + strings.ReplaceAll(typ, ".", "_"), true
	},
}

// startServer starts an embedded JetStream server for one test and
// returns a connection to it; both are closed at cleanup.
func startServer(t *testing.T, opts ...func(*server.Options)) *nats.Conn {
	t.Helper()
	o := &server.Options{JetStream: true, StoreDir: t.TempDir(), DontListen: true, NoLog: true, NoSigs: true}
	for _, f := range opts {
		f(o)
	}
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		t.Fatal("embedded server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	nc, err := nats.Connect("", nats.InProcessServer(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// newCore starts a server with the task, dead-letter and advisory streams
// of testTopo and the errors bucket, and returns a core on it.
func newCore(t *testing.T, opts ...func(*server.Options)) (*Core, jetstream.JetStream) {
	t.Helper()
	nc := startServer(t, opts...)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for _, cfg := range []jetstream.StreamConfig{
		{Name: testTopo.TaskStream, Subjects: []string{"jetflow.task.>"}, Retention: jetstream.WorkQueuePolicy, AllowDirect: true},
		{Name: testTopo.DLQStream, Subjects: []string{"jetflow.dlq.>"}, AllowDirect: true},
		{Name: testTopo.AdvisoryStream, Subjects: []string{
			advisoryMaxDeliveries + testTopo.TaskStream + ".>",
			advisoryTerminated + testTopo.TaskStream + ".>",
		}},
	} {
		if _, err := js.CreateStream(ctx, cfg); err != nil {
			t.Fatalf("stream %s: %v", cfg.Name, err)
		}
	}
	c := NewCore(nc, js, testTopo, discard())
	if err := c.Prepare(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	return c, js
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// waitFor polls cond until it holds, failing the test after 20 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

// records returns the records of the dead-letter stream, in order.
func records(t *testing.T, js jetstream.JetStream) []*jetstream.RawStreamMsg {
	t.Helper()
	s, err := js.Stream(t.Context(), testTopo.DLQStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(t.Context(), seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, m)
	}
	return out
}

// taskCount returns the number of messages in the task stream.
func taskCount(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), testTopo.TaskStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}
