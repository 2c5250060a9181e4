// Package jetflowprom exports jetflow metrics to Prometheus with
// client_golang, registered in the caller's registry.
//
// It is a module of its own (github.com/jetflow-io/jetflow/contrib/prometheus),
// so that programs using only the framework never download client_golang.
//
// # Worker and client counters
//
// [New] registers task counters, a handler duration histogram, the number of
// running tasks and the breaker state, fed by framework hooks:
//
//	m, err := jetflowprom.New(prometheus.DefaultRegisterer, jetflowprom.Options{})
//	w, err := framework.NewWorker(nc)
//	m.Instrument(w)                                     // before w.Start
//	cl, err := framework.NewClient(nc, framework.WithHooks(m.Hooks()))
//
// Hooks of your own sit beside the adapter's: [framework.WithHooks] may be
// given several times (every set runs), and Instrument adds its set to the
// worker without taking the place of the worker's WithHooks.
//
// The series:
//
//	jetflow_tasks_total{type, priority, outcome}     counter; outcome is enqueued,
//	    started, succeeded, retried, failed (every task that failed for good)
//	    or dead_lettered (those of the failed ones the worker wrote to the
//	    dead-letter stream itself)
//	jetflow_task_duration_seconds{type, priority, outcome}  histogram of handler
//	    run time per attempt; outcome succeeded, retried or failed
//	jetflow_tasks_running                            gauge, tasks running in the
//	    instrumented workers
//	jetflow_breaker_state{dependency, state}         gauge, 1 for the state the
//	    process's breaker of the dependency is in (closed, half-open, open)
//
// # Queue gauges
//
// [NewQueueCollector] reads the queues from JetStream at each scrape, so any
// process (a worker, an API server, `jetflow ui`) can export them; register
// it once per cluster to avoid duplicate series. Its series and names are
// those of the dashboard's /metrics endpoint (package ui), but for
// jetflow_breaker_state: the dashboard reads it from the breaker records,
// while here [New] exports the process's own breakers under that name.
package jetflowprom

import (
	"context"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
)

// Outcome label values of jetflow_tasks_total.
const (
	OutcomeEnqueued     = "enqueued"
	OutcomeStarted      = "started"
	OutcomeSucceeded    = "succeeded"
	OutcomeRetried      = "retried"
	OutcomeFailed       = "failed"
	OutcomeDeadLettered = "dead_lettered"
)

// DefaultBuckets are the default duration buckets, in seconds: 5 ms to
// about 5 minutes.
var DefaultBuckets = prometheus.ExponentialBuckets(0.005, 3, 11)

// Options configure [New].
type Options struct {
	// Buckets are the handler duration histogram's buckets, in seconds.
	// Default [DefaultBuckets].
	Buckets []float64
	// ConstLabels are added to every series (for example an application
	// name). Default none.
	ConstLabels prometheus.Labels
}

// Metrics holds the registered collectors. Its methods are safe for
// concurrent use.
type Metrics struct {
	tasks    *prometheus.CounterVec
	duration *prometheus.HistogramVec
	breakers *prometheus.GaugeVec

	mu      sync.Mutex
	workers []*framework.Worker
}

// New creates the metrics and registers them with reg. It returns the
// registry's error when a collector with the same names is registered
// already (for example New called twice on one registry).
func New(reg prometheus.Registerer, opts Options) (*Metrics, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: nil registerer", framework.ErrInvalidOption)
	}
	buckets := opts.Buckets
	if len(buckets) == 0 {
		buckets = DefaultBuckets
	}
	m := &Metrics{
		tasks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "jetflow_tasks_total", ConstLabels: opts.ConstLabels,
			Help: "Tasks by type, priority and outcome: enqueued, started (attempts), succeeded, retried, failed (for good) and dead_lettered (by the worker).",
		}, []string{"type", "priority", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "jetflow_task_duration_seconds", ConstLabels: opts.ConstLabels, Buckets: buckets,
			Help: "Handler run time per attempt, by type, priority and outcome (succeeded, retried, failed).",
		}, []string{"type", "priority", "outcome"}),
		breakers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "jetflow_breaker_state", ConstLabels: opts.ConstLabels,
			Help: "1 for the state (closed, half-open, open) the dependency's circuit breaker is in.",
		}, []string{"dependency", "state"}),
	}
	running := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "jetflow_tasks_running", ConstLabels: opts.ConstLabels,
		Help: "Tasks whose handler runs now in the instrumented workers.",
	}, m.running)
	for _, c := range []prometheus.Collector{m.tasks, m.duration, m.breakers, running} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("jetflowprom: register: %w", err)
		}
	}
	return m, nil
}

func (m *Metrics) running() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, w := range m.workers {
		n += w.Stats().Running
	}
	return float64(n)
}

// Instrument adds the metrics' hooks to w ([framework.Worker.AddHooks],
// beside the worker's own) and counts its running tasks. Call it before
// w.Start; it panics afterwards.
func (m *Metrics) Instrument(w *framework.Worker) {
	w.AddHooks(m.Hooks())
	m.mu.Lock()
	m.workers = append(m.workers, w)
	m.mu.Unlock()
}

// Hooks returns the hooks that feed the metrics, for [framework.WithHooks]
// on a client (enqueued tasks) or a worker, or to combine with your own.
func (m *Metrics) Hooks() framework.Hooks {
	return framework.Hooks{
		Enqueued: func(_ context.Context, info framework.TaskInfo) {
			if !info.Duplicate {
				m.tasks.WithLabelValues(info.Type, info.Priority.String(), OutcomeEnqueued).Inc()
			}
		},
		Started: func(_ context.Context, t *framework.Task) {
			m.tasks.WithLabelValues(t.Type, t.Priority.String(), OutcomeStarted).Inc()
		},
		Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
			prio := t.Priority.String()
			var outcome string
			switch o.Action {
			case framework.ActionAck:
				outcome = OutcomeSucceeded
			case framework.ActionRetry:
				outcome = OutcomeRetried
			case framework.ActionFail:
				outcome = OutcomeFailed
				if o.DeadLettered {
					m.tasks.WithLabelValues(t.Type, prio, OutcomeDeadLettered).Inc()
				}
			default:
				return
			}
			m.tasks.WithLabelValues(t.Type, prio, outcome).Inc()
			m.duration.WithLabelValues(t.Type, prio, outcome).Observe(o.Took.Seconds())
		},
		Event: func(_ context.Context, ev any) {
			c, ok := ev.(breaker.StateChange)
			if !ok {
				return
			}
			for _, s := range []breaker.State{breaker.StateClosed, breaker.StateHalfOpen, breaker.StateOpen} {
				v := 0.0
				if s == c.To {
					v = 1
				}
				m.breakers.WithLabelValues(c.Dependency, s.String()).Set(v)
			}
		},
	}
}
