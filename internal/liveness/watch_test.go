package liveness

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/testutil"
)

var errStalled = errors.New("test: pull stalled")

// watchConfig returns the config of a watcher of a worker that runs when
// running is true, logging to logs.
func watchConfig(t *testing.T, running bool, logs *testutil.LogBuffer) WatchConfig {
	t.Helper()
	s := testutil.RunServer(t)
	return WatchConfig{Conn: testutil.Connect(t, s), Log: slog.New(slog.NewTextHandler(logs, nil)), LogKeyError: "err",
		Loops: &Loops{}, StallLimit: 20 * time.Millisecond, ErrStalled: errStalled,
		Running: func() bool { return running }, Started: func() time.Time { return time.Now().Add(-time.Hour) }}
}

// A connection closed for good closes Lost, is logged, and makes LostErr
// match ErrNotConnected; nothing stalled meanwhile.
func TestWatcherLost(t *testing.T) {
	t.Parallel()
	var logs testutil.LogBuffer
	cfg := watchConfig(t, false, &logs)
	cfg.Loops.Loop("c") // silent for an hour, but the worker does not run
	w := NewWatcher(cfg)
	stop := make(chan struct{})
	defer close(stop)
	w.Watch(stop)
	cfg.Conn.Close()
	testutil.Recv(t, w.Lost(), 10*time.Second, "Lost after the connection closed")
	if err := w.LostErr(); !errors.Is(err, natserr.ErrNotConnected) ||
		!strings.HasPrefix(err.Error(), "framework: worker stopped: connection closed: ") {
		t.Errorf("LostErr = %v; want the worker stopped, matching ErrNotConnected", err)
	}
	if !strings.Contains(logs.String(), "jetflow worker connection closed for good; stopping") {
		t.Errorf("log %q does not record the closed connection", logs.String())
	}
	if w.StallErr() != nil {
		t.Errorf("StallErr = %v of a worker not running", w.StallErr())
	}
}

// A fetch loop silent beyond the stall limit while the worker runs closes
// Stalled, is logged with its consumer, and makes StallErr wrap the
// configured sentinel.
func TestWatcherStalled(t *testing.T) {
	t.Parallel()
	var logs testutil.LogBuffer
	cfg := watchConfig(t, true, &logs)
	cfg.Loops.Loop("JETFLOW_a_normal")
	w := NewWatcher(cfg)
	if w.StallErr() != nil {
		t.Fatal("StallErr before any stall")
	}
	stop := make(chan struct{})
	defer close(stop)
	w.Watch(stop)
	testutil.Recv(t, w.Stalled(), 10*time.Second, "Stalled after a loop was silent for an hour")
	err := w.StallErr()
	if !errors.Is(err, errStalled) || !strings.Contains(err.Error(), "consumer JETFLOW_a_normal heard nothing from the server for ") ||
		!strings.HasSuffix(err.Error(), "(limit 20ms)") {
		t.Errorf("StallErr = %v; want the sentinel, the consumer and the limit", err)
	}
	if log := logs.String(); !strings.Contains(log, "jetflow worker pull stalled; stopping") || !strings.Contains(log, "err=") {
		t.Errorf("log %q does not record the stall with its error", log)
	}
	select {
	case <-w.Lost():
		t.Error("Lost closed on an open connection")
	default:
	}
}

// Closing stop ends the watch with nothing reported (TestMain's goleak
// checks that its goroutines return).
func TestWatcherStopped(t *testing.T) {
	t.Parallel()
	var logs testutil.LogBuffer
	cfg := watchConfig(t, true, &logs)
	w := NewWatcher(cfg)
	stop := make(chan struct{})
	w.Watch(stop)
	close(stop)
	select {
	case <-w.Lost():
		t.Error("Lost closed")
	case <-w.Stalled():
		t.Error("Stalled closed without a loop")
	default:
	}
}
