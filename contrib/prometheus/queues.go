package jetflowprom

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
)

// QueueCollectorOptions configure [NewQueueCollector].
type QueueCollectorOptions struct {
	// Prefix is the jetflow topology prefix. Default "jetflow".
	Prefix string
	// Timeout bounds the JetStream queries of one scrape. Default 5 s.
	Timeout time.Duration
	// Logger receives query errors. Default: discard.
	Logger *slog.Logger
	// ConstLabels are added to every series. Default none.
	ConstLabels prometheus.Labels
}

// QueueCollector is a [prometheus.Collector] of queue gauges read from
// JetStream at each scrape: one consumer list, one stream info per stream,
// a scan of the delayed tasks and one direct get per queue with waiting
// tasks. It is safe for concurrent use.
type QueueCollector struct {
	op      *inspect.Operator
	timeout time.Duration
	log     *slog.Logger

	up, waiting, scheduled, pendingAcks, redelivered, oldest, paused, pulling, delivered,
	dead, scheduledAll, cron, broken *prometheus.Desc
}

// NewQueueCollector returns a collector of the queues of the topology on nc.
// Register it with prometheus.Registerer.Register.
func NewQueueCollector(nc *nats.Conn, opts QueueCollectorOptions) (*QueueCollector, error) {
	op, timeout, log, d, err := collectorBase(nc, opts.Prefix, opts.Timeout, opts.Logger, opts.ConstLabels)
	if err != nil {
		return nil, err
	}
	q := []string{"type", "priority"}
	return &QueueCollector{
		op: op, timeout: timeout, log: log,
		up:           d("jetflow_inspect_up", "1 when the last JetStream query for these metrics succeeded.", nil),
		waiting:      d("jetflow_queue_waiting", "Tasks stored and not yet delivered to a worker.", q),
		scheduled:    d("jetflow_queue_scheduled", "Delayed tasks waiting in server-side schedules.", q),
		pendingAcks:  d("jetflow_queue_pending_acks", "Delivered tasks not yet acknowledged: running or waiting for a retry.", q),
		redelivered:  d("jetflow_queue_redelivered", "Unacknowledged tasks delivered more than once.", q),
		oldest:       d("jetflow_queue_oldest_waiting_age_seconds", "Age of the oldest task not yet delivered, 0 when none waits.", q),
		paused:       d("jetflow_queue_paused", "1 while the queue's consumer is paused (by hand or by a circuit breaker).", q),
		pulling:      d("jetflow_queue_pull_requests_waiting", "Pull requests of idle workers waiting on the queue's consumer.", q),
		delivered:    d("jetflow_queue_delivered_total", "Deliveries made by the queue's consumer since it was created, redeliveries included.", q),
		dead:         d("jetflow_dead_letters", "Records in the dead-letter stream per task type.", []string{"type"}),
		scheduledAll: d("jetflow_scheduled_tasks", "Delayed tasks waiting in schedules, all queues.", nil),
		cron:         d("jetflow_cron_schedules", "Repeating (cron) schedules.", nil),
		broken: d("jetflow_schedules_broken", "Schedules that never fire because the last message on their subject is not a schedule jetflow wrote, "+
			"by kind: cron (restored by registering it again) or delayed (lost).", []string{"kind"}),
	}, nil
}

// Describe implements [prometheus.Collector].
func (c *QueueCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.up, c.waiting, c.scheduled, c.pendingAcks, c.redelivered, c.oldest,
		c.paused, c.pulling, c.delivered, c.dead, c.scheduledAll, c.cron, c.broken} {
		ch <- d
	}
}

// Collect implements [prometheus.Collector]. A failed query yields only
// jetflow_inspect_up 0.
func (c *QueueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	if err := c.collect(ctx, ch); err != nil {
		c.log.Error("jetflow queue metrics query failed", "error", err)
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
}

type queueKey struct {
	typ  string
	prio framework.Priority
}

func (c *QueueCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	st, err := c.op.QueueStats(ctx)
	if err != nil {
		return err
	}
	acts, err := c.op.QueueActivity(ctx)
	if err != nil {
		return err
	}
	act := make(map[queueKey]inspect.QueueActivity, len(acts))
	for _, a := range acts {
		act[queueKey{a.Type, a.Priority}] = a
	}
	var out []prometheus.Metric
	add := func(d *prometheus.Desc, kind prometheus.ValueType, v float64, labels ...string) error {
		m, err := prometheus.NewConstMetric(d, kind, v, labels...)
		if err != nil {
			return fmt.Errorf("jetflowprom: %w", err)
		}
		out = append(out, m)
		return nil
	}
	for _, q := range st.Queues {
		l := []string{q.Type, q.Priority.String()}
		a := act[queueKey{q.Type, q.Priority}]
		age := 0.0
		if !a.OldestWaiting.IsZero() {
			age = max(st.Taken.Sub(a.OldestWaiting).Seconds(), 0)
		}
		paused := 0.0
		if q.Paused {
			paused = 1
		}
		for _, s := range []struct {
			d    *prometheus.Desc
			kind prometheus.ValueType
			v    float64
		}{
			{c.waiting, prometheus.GaugeValue, float64(q.Pending)},
			{c.scheduled, prometheus.GaugeValue, float64(q.Scheduled)},
			{c.pendingAcks, prometheus.GaugeValue, float64(q.InFlight)},
			{c.redelivered, prometheus.GaugeValue, float64(q.Redelivered)},
			{c.oldest, prometheus.GaugeValue, age},
			{c.paused, prometheus.GaugeValue, paused},
			{c.pulling, prometheus.GaugeValue, float64(a.Pulling)},
			{c.delivered, prometheus.CounterValue, float64(a.Delivered)},
		} {
			if err := add(s.d, s.kind, s.v, l...); err != nil {
				return err
			}
		}
	}
	for typ, n := range st.Dead {
		if err := add(c.dead, prometheus.GaugeValue, float64(n), typ); err != nil {
			return err
		}
	}
	if err := add(c.scheduledAll, prometheus.GaugeValue, float64(st.Scheduled)); err != nil {
		return err
	}
	if err := add(c.cron, prometheus.GaugeValue, float64(st.Cron)); err != nil {
		return err
	}
	if err := add(c.broken, prometheus.GaugeValue, float64(st.BrokenCron), "cron"); err != nil {
		return err
	}
	if err := add(c.broken, prometheus.GaugeValue, float64(st.BrokenScheduled), "delayed"); err != nil {
		return err
	}
	for _, m := range out {
		ch <- m
	}
	return nil
}
