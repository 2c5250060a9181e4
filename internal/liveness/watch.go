package liveness

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/natserr"
)

// WatchConfig is what a [Watcher] watches and how it reports.
type WatchConfig struct {
	// Conn is the worker's connection.
	Conn *nats.Conn
	// Log is the worker's logger, LogKeyError the key of an error
	// attribute in its records (framework.LogKeyError).
	Log         *slog.Logger
	LogKeyError string
	// Loops are the worker's fetch loops and StallLimit how long one may
	// hear nothing from the server before the worker stops.
	Loops      *Loops
	StallLimit time.Duration
	// Running reports whether the worker runs (stalls are looked for only
	// then); Started returns when it started.
	Running func() bool
	Started func() time.Time
	// ErrStalled is the sentinel a stall's error wraps
	// (framework.ErrPullStalled).
	ErrStalled error
}

// Watcher tells a worker that must stop because it can consume nothing
// any more: its connection closed for good ([Watcher.Lost]) or a fetch
// loop stalled ([Watcher.Stalled]). Each is logged at Error once, when it
// happens, so that the reason is on record even if the worker's Run is
// not waiting. Its methods are safe for concurrent use.
type Watcher struct {
	cfg      WatchConfig
	lost     chan struct{}
	stalled  chan struct{}
	stallErr error // set before stalled is closed
}

// NewWatcher returns a watcher configured by cfg; [Watcher.Watch] starts
// it.
func NewWatcher(cfg WatchConfig) *Watcher {
	return &Watcher{cfg: cfg, lost: make(chan struct{}), stalled: make(chan struct{})}
}

// Watch watches the connection and the fetch loops, each in a goroutine of
// its own, until stop is closed (the worker stops pulling). Call it once.
func (w *Watcher) Watch(stop <-chan struct{}) {
	go w.watchConn(stop)
	go w.watchStalls(stop)
}

// Lost is closed when the connection closed for good while the worker
// ran; [Watcher.LostErr] is then the worker's error.
func (w *Watcher) Lost() <-chan struct{} { return w.lost }

// Stalled is closed when a fetch loop stalled beyond the stall limit
// while the worker ran; [Watcher.StallErr] is then the worker's error.
func (w *Watcher) Stalled() <-chan struct{} { return w.stalled }

// LostErr returns the error of a worker whose connection closed for good:
// it wraps [natserr.ErrNotConnected] and the connection's last error, if
// any.
func (w *Watcher) LostErr() error {
	if last := w.cfg.Conn.LastError(); last != nil {
		return fmt.Errorf("framework: worker stopped: connection closed: %w: %w", natserr.ErrNotConnected, last)
	}
	return fmt.Errorf("framework: worker stopped: connection closed: %w", natserr.ErrNotConnected)
}

// StallErr returns the error of a worker whose fetch loop stalled,
// wrapping WatchConfig.ErrStalled; nil before [Watcher.Stalled] is
// closed.
func (w *Watcher) StallErr() error {
	select {
	case <-w.stalled:
		return w.stallErr
	default:
		return nil
	}
}

// watchConn closes lost when the connection closes for good before stop.
func (w *Watcher) watchConn(stop <-chan struct{}) {
	if !WaitClosed(w.cfg.Conn, stop) {
		return
	}
	w.cfg.Log.Error("jetflow worker connection closed for good; stopping", slog.Any(w.cfg.LogKeyError, w.cfg.Conn.LastError()))
	close(w.lost)
}

// watchStalls closes stalled when a fetch loop stalls beyond the stall
// limit before stop.
func (w *Watcher) watchStalls(stop <-chan struct{}) {
	limit := w.cfg.StallLimit
	name, since, ok := w.cfg.Loops.Watch(stop, limit, w.cfg.Running, w.cfg.Started)
	if !ok {
		return
	}
	err := fmt.Errorf("%w: consumer %s heard nothing from the server for %v (limit %v)",
		w.cfg.ErrStalled, name, since.Round(time.Millisecond), limit)
	w.cfg.Log.Error("jetflow worker pull stalled; stopping", slog.Any(w.cfg.LogKeyError, err))
	w.stallErr = err
	close(w.stalled)
}
