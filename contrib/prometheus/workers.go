package jetflowprom

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
)

// WorkerCollectorOptions configure [NewWorkerCollector].
type WorkerCollectorOptions struct {
	// Prefix is the jetflow topology prefix. Default "jetflow".
	Prefix string
	// Timeout bounds the registry read of one scrape. Default 5 s.
	Timeout time.Duration
	// Logger receives query errors. Default: discard.
	Logger *slog.Logger
	// ConstLabels are added to every series. Default none.
	ConstLabels prometheus.Labels
}

// WorkerCollector is a [prometheus.Collector] of the worker registry
// (inspect.Operator.Workers), read at each scrape in one watch of its
// bucket:
//
//   - jetflow_workers{type,priority}: live workers serving each queue
//     (a queue no live worker serves has no series: alert with "unless",
//     see docs/operations.md);
//   - jetflow_workers_live: live workers;
//   - jetflow_worker_slots and jetflow_worker_slots_busy: their slots, and
//     those running a handler at their last heartbeat;
//   - jetflow_workers_registry_up: 1 when the registry was read (0 also when
//     it does not exist yet);
//   - jetflow_payload_version_unserved{type,version}: 1 for a payload
//     version that live workers hand back and none accepts
//     (inspect.Fleet.Unserved): its tasks wait, and are dead-lettered with
//     reason "version" after the workers' grace.
//
// It is safe for concurrent use.
type WorkerCollector struct {
	op      *inspect.Operator
	timeout time.Duration
	log     *slog.Logger

	up, workers, live, slots, busy, unserved *prometheus.Desc
}

// NewWorkerCollector returns a collector of the worker registry of the
// topology on nc. Register it with prometheus.Registerer.Register.
func NewWorkerCollector(nc *nats.Conn, opts WorkerCollectorOptions) (*WorkerCollector, error) {
	op, timeout, log, d, err := collectorBase(nc, opts.Prefix, opts.Timeout, opts.Logger, opts.ConstLabels)
	if err != nil {
		return nil, err
	}
	return &WorkerCollector{
		op: op, timeout: timeout, log: log,
		up:      d("jetflow_workers_registry_up", "1 when the worker registry was read at this scrape.", nil),
		workers: d("jetflow_workers", "Live workers serving the queue, from the worker registry.", []string{"type", "priority"}),
		live:    d("jetflow_workers_live", "Live workers in the worker registry.", nil),
		slots:   d("jetflow_worker_slots", "Handler slots (concurrency) of the live workers.", nil),
		busy:    d("jetflow_worker_slots_busy", "Handler slots of the live workers running a task at their last heartbeat.", nil),
		unserved: d("jetflow_payload_version_unserved", "1 for a payload version live workers hand back and none accepts; its tasks are dead-lettered after the workers' grace.",
			[]string{"type", "version"}),
	}, nil
}

// Describe implements [prometheus.Collector].
func (c *WorkerCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.workers, c.live, c.slots, c.busy, c.unserved} {
		ch <- d
	}
}

// Collect implements [prometheus.Collector]. A failed read, or a registry
// that does not exist yet, yields only jetflow_workers_registry_up 0.
func (c *WorkerCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	f, err := c.op.Workers(ctx)
	if err == nil && !f.Registry {
		err = fmt.Errorf("jetflowprom: no worker registry bucket")
	}
	if err != nil {
		c.log.Error("jetflow worker metrics query failed", "error", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	type queue struct {
		typ  string
		prio framework.Priority
	}
	counts := make(map[queue]int)
	var slots, busy int
	for _, w := range f.Workers {
		slots += w.Concurrency
		busy += w.Busy
		for _, t := range w.Types {
			for _, p := range t.Priorities {
				counts[queue{t.Type, p}]++
			}
		}
	}
	for q, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, float64(n), q.typ, q.prio.String())
	}
	for _, u := range f.Unserved {
		ch <- prometheus.MustNewConstMetric(c.unserved, prometheus.GaugeValue, 1, u.Type, strconv.Itoa(u.Version))
	}
	ch <- prometheus.MustNewConstMetric(c.live, prometheus.GaugeValue, float64(len(f.Workers)))
	ch <- prometheus.MustNewConstMetric(c.slots, prometheus.GaugeValue, float64(slots))
	ch <- prometheus.MustNewConstMetric(c.busy, prometheus.GaugeValue, float64(busy))
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
}

// collectorBase is what every collector of this package starts from: an
// operator's read-only view of the topology under prefix on nc, the
// scrape's timeout (default 5 s), a logger (default: discard) and a
// constructor of descriptors with constLabels.
func collectorBase(nc *nats.Conn, prefix string, timeout time.Duration, log *slog.Logger, constLabels prometheus.Labels) (
	*inspect.Operator, time.Duration, *slog.Logger, func(name, help string, labels []string) *prometheus.Desc, error) {
	copts := []framework.ClientOption{framework.WithStateTracking(false)} // it only reads
	if prefix != "" {
		copts = append(copts, framework.WithPrefix(prefix))
	}
	cl, err := framework.NewClient(nc, copts...)
	if err != nil {
		return nil, 0, nil, nil, err
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, constLabels)
	}
	return inspect.New(cl), timeout, log, d, nil
}
