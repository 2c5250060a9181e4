package faulttest

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/health"
	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestWorkerStartsThroughQuorumLoss starts a worker whose consumers exist
// on a 3-node cluster while two nodes are down (no stream, consumer or meta
// leader can be elected: JetStream requests go unanswered), checks that the worker says
// what its Start waits for (Liveness.Starting, the health report, a Warn
// log), then brings the nodes back and checks that Start returns once the
// leaders are elected, not after its own deadline: each request gets a
// deadline of its own inside Start's, so a request lost while no leader
// answered is tried again.
func TestWorkerStartsThroughQuorumLoss(t *testing.T) {
	t.Parallel()
	const (
		typ        = "fault.startwait"
		startLimit = 3 * time.Minute // Start's deadline: far beyond election time
	)
	c := testutil.RunCluster(t, 3)
	_, js := c.JetStream(t)
	ensure(t, js, 3)
	// An earlier run of the worker created its consumers: Start looks
	// them up, as a restarted or added worker does.
	earlier := newWorker(t, c.Connect(t))
	earlier.HandleFunc(typ, func(context.Context, *framework.Task) error { return nil })
	start(t, earlier)
	if err := earlier.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	led := leaderships(t, js)
	c.StopNode(1)
	c.StopNode(2)
	// Until its raft groups notice the lost quorum, node 0 still leads
	// and answers: wait until it leads nothing Start could ask.
	s0 := c.Server(0)
	testutil.Wait(t, time.Minute, "node 0 gave up its leaderships", func() bool {
		if s0.JetStreamIsLeader() {
			return false
		}
		for _, l := range led {
			if l.consumer == "" && s0.JetStreamIsStreamLeader(testutil.GlobalAccount, l.stream) ||
				l.consumer != "" && s0.JetStreamIsConsumerLeader(testutil.GlobalAccount, l.stream, l.consumer) {
				return false
			}
		}
		return true
	})

	nc, err := nats.Connect(c.Server(0).ClientURL(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	logs := &warnLog{}
	w := newWorker(t, nc, framework.WithLogger(slog.New(logs)))
	w.HandleFunc(typ, func(context.Context, *framework.Task) error { return nil })
	ctx, cancel := context.WithTimeout(t.Context(), startLimit)
	defer cancel()
	started := make(chan error, 1)
	go func() { started <- w.Start(ctx) }()

	testutil.Wait(t, time.Minute, "Start reports what it waits for", func() bool {
		select {
		case err := <-started:
			t.Fatalf("Start returned while two of three nodes were down: %v; logged %q", err, logs.all())
		default:
		}
		return len(liveness.Of(w).Starting) > 0 && logs.has("jetflow worker start is slow")
	})
	waits := liveness.Of(w).Starting
	hctx, hcancel := context.WithTimeout(t.Context(), 10*time.Second)
	rep := health.Check(hctx, w)
	hcancel()
	if rep.Ready || !strings.Contains(strings.Join(rep.Problems, "\n"), "starting: waiting for "+waits[0].What) {
		t.Errorf("health report while starting: ready %v, problems %q; Start waits for %+v", rep.Ready, rep.Problems, waits)
	}
	t.Logf("while the quorum was lost, Start waited for %+v; logged: %s", waits, logs.first("jetflow worker start is slow"))

	c.RestartNode(t, 1)
	c.RestartNode(t, 2)
	back := time.Now()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("Start: %v", err)
		}
	case <-time.After(startLimit):
		t.Fatal("Start did not return")
	}
	took := time.Since(back)
	t.Logf("Start returned %v after the nodes came back", took.Round(10*time.Millisecond))
	// Elections take seconds; Start's deadline is minutes. A request
	// waited on until Start's deadline would show here.
	if took > time.Minute {
		t.Errorf("Start returned %v after the nodes came back: it waited on a request", took)
	}
	if got := liveness.Of(w).Starting; len(got) != 0 {
		t.Errorf("started worker still waits for %+v", got)
	}
}

// warnLog is a slog.Handler keeping the messages of Warn records and above.
type warnLog struct {
	mu   sync.Mutex
	recs []string
}

func (h *warnLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (h *warnLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.mu.Lock()
	h.recs = append(h.recs, b.String())
	h.mu.Unlock()
	return nil
}

func (h *warnLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *warnLog) WithGroup(string) slog.Handler      { return h }

func (h *warnLog) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.recs...)
}

func (h *warnLog) has(prefix string) bool { return h.first(prefix) != "" }

func (h *warnLog) first(prefix string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if strings.HasPrefix(r, prefix) {
			return r
		}
	}
	return ""
}

// leadership names a stream (consumer "") or a consumer of one.
type leadership struct{ stream, consumer string }

// leaderships lists every stream of js and each of their consumers.
func leaderships(t *testing.T, js jetstream.JetStream) []leadership {
	t.Helper()
	var out []leadership
	names := js.StreamNames(t.Context())
	for stream := range names.Name() {
		out = append(out, leadership{stream: stream})
		s, err := js.Stream(t.Context(), stream)
		if err != nil {
			t.Fatal(err)
		}
		cons := s.ConsumerNames(t.Context())
		for c := range cons.Name() {
			out = append(out, leadership{stream, c})
		}
		if err := cons.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
