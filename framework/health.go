package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Health thresholds.
const (
	// PullStallReady is how long a consumer's fetch loop may go without
	// polling the server (it polls every 250 ms) before the worker is not
	// ready. A loop waiting for a free slot is busy, not stalled.
	PullStallReady = 10 * time.Second
	// PullStallLive is the default stall limit ([WithStallLimit]): how long
	// before the worker is not live either and [Worker.Run] returns
	// [ErrPullStalled]: its fetch loop is wedged and a restart is the cure.
	PullStallLive = 2 * time.Minute
	// MinStallLimit is the shortest stall limit [WithStallLimit] accepts:
	// a few idle heartbeats of an idle consumer.
	MinStallLimit = 3 * time.Second
)

// healthRequestTimeout bounds each consumer lookup of [Worker.Health]: a
// server that does not answer within it counts as not ready.
const healthRequestTimeout = 2 * time.Second

// ConsumerHealth is the state of one (task type, priority) consumer a
// worker pulls from.
type ConsumerHealth struct {
	Type     string   `json:"type"`
	Priority Priority `json:"priority"`
	Consumer string   `json:"consumer"`
	// Present is false when the consumer does not exist on the server (or
	// could not be read: see Error).
	Present bool   `json:"present"`
	Error   string `json:"error,omitempty"`
	// LastPoll is when the fetch loop last heard from its pull (a task or
	// an empty wait); zero before the first.
	LastPoll time.Time `json:"last_poll,omitzero"`
	// Busy is true while the loop waits for a free handler slot.
	Busy bool `json:"busy"`
	// Paused is true while the server holds the consumer paused (an
	// operator or an open circuit breaker): expected, not a fault.
	Paused bool `json:"paused"`
}

// HealthReport is a worker's answer to "is it alive, can it take work?";
// see [Worker.Health].
type HealthReport struct {
	// Live is false when only a restart can help: the worker is not running,
	// its connection is closed for good, or a fetch loop is wedged for the
	// stall limit ([WithStallLimit], default [PullStallLive]).
	Live bool `json:"live"`
	// Ready is Live plus: connected, every consumer present, and every
	// fetch loop polling (within [PullStallReady]) or busy.
	Ready bool `json:"ready"`
	// Connection is the NATS connection's status ("CONNECTED",
	// "RECONNECTING", "CLOSED"…).
	Connection string           `json:"connection"`
	Consumers  []ConsumerHealth `json:"consumers"`
	// Problems says, in words, why the worker is not live or not ready.
	Problems []string  `json:"problems,omitempty"`
	Checked  time.Time `json:"checked"`
}

// healthState tracks each fetch loop's last poll. Fetch loops write it;
// Health reads it.
type healthState struct {
	mu    sync.Mutex
	loops map[string]*loopHealth // by consumer name
}

type loopHealth struct {
	polled atomic.Int64 // Unix nanoseconds
	busy   atomic.Bool
	// busySeen is when the stall watchdog last saw the loop busy (Unix
	// nanoseconds): waiting for a slot is no stall, so the clock restarts
	// from there, without a clock read per task on the fetch path.
	busySeen atomic.Int64
}

// loop returns the record of the fetch loop of consumer name.
func (h *healthState) loop(name string) *loopHealth {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.loops == nil {
		h.loops = make(map[string]*loopHealth)
	}
	l := h.loops[name]
	if l == nil {
		l = &loopHealth{}
		h.loops[name] = l
	}
	return l
}

// poll notes that a fetch loop heard from its pull at t; an earlier t than
// the last one noted changes nothing.
func (l *loopHealth) poll(t time.Time) {
	ns := t.UnixNano()
	for {
		old := l.polled.Load()
		if ns <= old || l.polled.CompareAndSwap(old, ns) {
			return
		}
	}
}

// Health checks the worker as a readiness or liveness probe would: it reads
// the state of each fetch loop and the connection, and asks the server
// whether each consumer exists (one request per consumer, each bounded by
// 2 s and by ctx; give probes a timeout of a few seconds).
// It is safe to call at any time from any goroutine.
func (w *Worker) Health(ctx context.Context) HealthReport {
	now := time.Now()
	r := HealthReport{Checked: now, Connection: w.nc.Status().String(), Live: true, Ready: true}
	notLive := func(format string, a ...any) {
		r.Live, r.Ready = false, false
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	notReady := func(format string, a ...any) {
		r.Ready = false
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	switch w.state.Load() {
	case workerNew:
		notLive("worker not started")
	case workerStopping:
		notLive("worker stopping or stopped")
	}
	switch st := w.nc.Status(); st {
	case nats.CONNECTED:
	case nats.CLOSED:
		notLive("NATS connection closed for good")
	default:
		notReady("NATS connection %s", st)
	}
	connected := w.nc.Status() == nats.CONNECTED
	for _, tt := range w.order {
		for _, p := range tt.cfg.priorities {
			name := w.names.ConsumerName(tt.name, p)
			ch := ConsumerHealth{Type: tt.name, Priority: p, Consumer: name}
			l := w.health.loop(name)
			if ns := l.polled.Load(); ns > 0 {
				ch.LastPoll = time.Unix(0, ns)
			}
			ch.Busy = l.busy.Load()
			if connected {
				cctx, cancel := context.WithTimeout(ctx, healthRequestTimeout)
				c, err := w.js.Consumer(cctx, w.taskStream, name)
				cancel()
				if err == nil {
					ch.Present, ch.Paused = true, c.CachedInfo().Paused
				}
				switch {
				case err == nil:
				case errors.Is(err, jetstream.ErrConsumerNotFound):
					ch.Error = "consumer does not exist"
					notReady("consumer %s does not exist", name)
				default:
					ch.Error = err.Error()
					notReady("consumer %s: %v", name, err)
				}
			}
			if r.Live && !ch.Busy && w.state.Load() == workerRunning {
				last := ch.LastPoll
				if last.IsZero() {
					last = w.startedAt()
				}
				since := now.Sub(last)
				switch {
				case since > w.opts.stallLimit:
					notLive("consumer %s: fetch loop stalled for %v", name, since.Round(time.Second))
				case ch.LastPoll.IsZero():
					notReady("consumer %s: fetch loop has not polled yet", name)
				case since > PullStallReady:
					notReady("consumer %s: fetch loop stalled for %v", name, since.Round(time.Second))
				}
			}
			r.Consumers = append(r.Consumers, ch)
		}
	}
	return r
}

// startedAt returns when the worker started, or the zero time.
func (w *Worker) startedAt() time.Time {
	if ns := w.started.Load(); ns > 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// ReadinessHandler returns an http.Handler for a readiness probe: 200 when
// [HealthReport.Ready], 503 otherwise, with the report as JSON. Mount it
// for Kubernetes, for example on "/readyz".
func (w *Worker) ReadinessHandler() http.Handler {
	return w.healthHandler(func(r HealthReport) bool { return r.Ready })
}

// LivenessHandler returns an http.Handler for a liveness probe: 200 when
// [HealthReport.Live], 503 otherwise, with the report as JSON. Mount it for
// Kubernetes, for example on "/livez".
func (w *Worker) LivenessHandler() http.Handler {
	return w.healthHandler(func(r HealthReport) bool { return r.Live })
}

func (w *Worker) healthHandler(ok func(HealthReport) bool) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), 5*time.Second)
		defer cancel()
		rep := w.Health(ctx)
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		if !ok(rep) {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(rw).Encode(rep)
	})
}
