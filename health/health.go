package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/liveness"
)

// PullStallReady is how long a consumer's fetch loop may go without polling
// the server (it polls every 250 ms) before the worker is not ready. A loop
// waiting for a free slot is busy, not stalled. The longer limit after
// which it is not live either is the worker's stall limit
// ([framework.Timings].StallLimit, default [framework.DefaultStallLimit]).
const PullStallReady = 10 * time.Second

// requestTimeout bounds each consumer lookup of [Check]: a server that does
// not answer within it counts as not ready.
const requestTimeout = 2 * time.Second

// handlerTimeout bounds the check behind one probe request.
const handlerTimeout = 5 * time.Second

// Consumer is the state of one (task type, priority) consumer a worker
// pulls from.
type Consumer struct {
	Type     string             `json:"type"`
	Priority framework.Priority `json:"priority"`
	Consumer string             `json:"consumer"`
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

// Report is a worker's answer to "is it alive, can it take work?"; see
// [Check].
type Report struct {
	// Live is false when only a restart can help: the worker is not running,
	// its connection is closed for good, or a fetch loop is wedged for the
	// stall limit ([framework.Timings].StallLimit, default
	// [framework.DefaultStallLimit]).
	Live bool `json:"live"`
	// Ready is Live plus: connected, every consumer present, and every
	// fetch loop polling (within [PullStallReady]) or busy.
	Ready bool `json:"ready"`
	// Connection is the NATS connection's status ("CONNECTED",
	// "RECONNECTING", "CLOSED"…).
	Connection string     `json:"connection"`
	Consumers  []Consumer `json:"consumers"`
	// Problems says, in words, why the worker is not live or not ready.
	Problems []string `json:"problems,omitempty"`
	// Stranded are subjects holding tasks of the worker's types that no
	// consumer reads ([framework.Worker.Stranded], as of the worker's latest
	// check): those tasks never run. A fault of configuration, not of this
	// worker: it does not make the worker not ready. Each is also in
	// Warnings.
	Stranded []framework.StrandedSubject `json:"stranded,omitempty"`
	// Warnings says, in words, what is wrong without making the worker not
	// ready.
	Warnings []string  `json:"warnings,omitempty"`
	Checked  time.Time `json:"checked"`
}

// Check checks w as a readiness or liveness probe would: it reads the
// state of each fetch loop and the connection, and asks the server whether
// each consumer exists (one request per consumer, each bounded by 2 s and by
// ctx; give probes a timeout of a few seconds). It is safe to call at any
// time from any goroutine.
func Check(ctx context.Context, w *framework.Worker) Report {
	now := time.Now()
	nc := w.Conn()
	r := Report{Checked: now, Connection: nc.Status().String(), Live: true, Ready: true}
	notLive := func(format string, a ...any) {
		r.Live, r.Ready = false, false
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	notReady := func(format string, a ...any) {
		r.Ready = false
		r.Problems = append(r.Problems, fmt.Sprintf(format, a...))
	}
	lv := liveness.Of(w)
	switch lv.State {
	case liveness.New:
		notLive("worker not started")
	case liveness.Stopping:
		notLive("worker stopping or stopped")
	}
	for _, sw := range lv.Starting {
		notReady("starting: waiting for %s for %v", sw.What, now.Sub(sw.Since).Round(time.Second))
	}
	switch st := nc.Status(); st {
	case nats.CONNECTED:
	case nats.CLOSED:
		notLive("NATS connection closed for good")
	default:
		notReady("NATS connection %s", st)
	}
	connected := nc.Status() == nats.CONNECTED
	js, stream := w.JetStream(), w.Names().TaskStream()
	for _, l := range lv.Loops {
		name := l.Consumer
		ch := Consumer{Type: l.Type, Priority: l.Priority, Consumer: name, LastPoll: l.LastPoll, Busy: l.Busy}
		if connected {
			cctx, cancel := context.WithTimeout(ctx, requestTimeout)
			c, err := js.Consumer(cctx, stream, name)
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
		if r.Live && !ch.Busy && lv.State == liveness.Running {
			last := ch.LastPoll
			if last.IsZero() {
				last = lv.Started
			}
			since := now.Sub(last)
			switch {
			case since > lv.StallLimit:
				notLive("consumer %s: fetch loop stalled for %v", name, since.Round(time.Second))
			case ch.LastPoll.IsZero():
				notReady("consumer %s: fetch loop has not polled yet", name)
			case since > PullStallReady:
				notReady("consumer %s: fetch loop stalled for %v", name, since.Round(time.Second))
			}
		}
		r.Consumers = append(r.Consumers, ch)
	}
	r.Stranded = w.Stranded()
	for _, s := range r.Stranded {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%d tasks of type %s stranded on %s: %s", s.Tasks, s.Type, s.Subject, s.Why))
	}
	return r
}

// ReadinessHandler returns an http.Handler for a readiness probe of w: 200
// when [Report.Ready], 503 otherwise, with the report as JSON. Mount it for
// Kubernetes, for example on "/readyz".
func ReadinessHandler(w *framework.Worker) http.Handler {
	return handler(w, func(r Report) bool { return r.Ready })
}

// LivenessHandler returns an http.Handler for a liveness probe of w: 200
// when [Report.Live], 503 otherwise, with the report as JSON. Mount it for
// Kubernetes, for example on "/livez".
func LivenessHandler(w *framework.Worker) http.Handler {
	return handler(w, func(r Report) bool { return r.Live })
}

func handler(w *framework.Worker, ok func(Report) bool) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), handlerTimeout)
		defer cancel()
		rep := Check(ctx, w)
		rw.Header().Set("Content-Type", "application/json")
		rw.Header().Set("Cache-Control", "no-store")
		if !ok(rep) {
			rw.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(rw).Encode(rep)
	})
}
