package ui

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/jetflow-io/jetflow/breaker"
)

// The gauges of GET metrics, in the Prometheus text exposition format
// (version 0.0.4). Queue series have the labels type and priority.
const (
	MetricQueueWaiting       = "jetflow_queue_waiting"
	MetricQueueScheduled     = "jetflow_queue_scheduled"
	MetricQueuePendingAcks   = "jetflow_queue_pending_acks"
	MetricQueueRedelivered   = "jetflow_queue_redelivered"
	MetricQueueOldestAge     = "jetflow_queue_oldest_waiting_age_seconds"
	MetricQueuePaused        = "jetflow_queue_paused"
	MetricQueuePullers       = "jetflow_queue_pull_requests_waiting"
	MetricQueueDelivered     = "jetflow_queue_delivered_total"
	MetricDeadLetters        = "jetflow_dead_letters"
	MetricScheduledTasks     = "jetflow_scheduled_tasks"
	MetricCronSchedules      = "jetflow_cron_schedules"
	MetricBreakerState       = "jetflow_breaker_state"
	MetricInspectUp          = "jetflow_inspect_up"
	MetricWorkers            = "jetflow_workers"
	MetricWorkersRegistryUp  = "jetflow_workers_registry_up"
	metricsContentType       = "text/plain; version=0.0.4; charset=utf-8"
	breakerStateDescriptions = "1 for the state of the dependency's latest breaker record (closed, half-open, open)"
)

// metrics writes the queue gauges. A failed query answers 200 with
// jetflow_inspect_up 0 and the error in a comment, so that the scrape
// itself stays up and alerts can key on the gauge.
func (h *handler) metrics(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	ov, err := h.snapshot(r)
	var brs []Breaker
	if err == nil {
		brs, err = h.breakerList(r)
	}
	w.Header().Set("Content-Type", metricsContentType)
	if err != nil {
		h.opts.Logger.Error("jetflow metrics query failed", "error", err)
		fmt.Fprintf(&b, "# query failed: %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		family(&b, MetricInspectUp, "gauge", "1 when the last JetStream query for these metrics succeeded")
		b.WriteString(MetricInspectUp + " 0\n")
		_, _ = w.Write(b.Bytes())
		return
	}
	writeMetrics(&b, ov, brs)
	_, _ = w.Write(b.Bytes())
}

// writeMetrics formats ov and brs.
func writeMetrics(b *bytes.Buffer, ov *Overview, brs []Breaker) {
	family(b, MetricInspectUp, "gauge", "1 when the last JetStream query for these metrics succeeded")
	b.WriteString(MetricInspectUp + " 1\n")
	queueFamilies := []struct {
		name, kind, help string
		value            func(q *Queue) float64
	}{
		{MetricQueueWaiting, "gauge", "Tasks stored and not yet delivered to a worker.", func(q *Queue) float64 { return float64(q.Waiting) }},
		{MetricQueueScheduled, "gauge", "Delayed tasks waiting in server-side schedules.", func(q *Queue) float64 { return float64(q.Scheduled) }},
		{MetricQueuePendingAcks, "gauge", "Delivered tasks not yet acknowledged: running or waiting for a retry.", func(q *Queue) float64 { return float64(q.InFlight) }},
		{MetricQueueRedelivered, "gauge", "Unacknowledged tasks delivered more than once.", func(q *Queue) float64 { return float64(q.Redelivered) }},
		{MetricQueueOldestAge, "gauge", "Age of the oldest task not yet delivered, 0 when none waits.", func(q *Queue) float64 { return q.OldestWaitingSeconds }},
		{MetricQueuePaused, "gauge", "1 while the queue's consumer is paused (by hand or by a circuit breaker).", func(q *Queue) float64 { return boolValue(q.Paused) }},
		{MetricQueuePullers, "gauge", "Pull requests of idle workers waiting on the queue's consumer.", func(q *Queue) float64 { return float64(q.Pulling) }},
		{MetricQueueDelivered, "counter", "Deliveries made by the queue's consumer since it was created, redeliveries included.", func(q *Queue) float64 { return float64(q.Delivered) }},
	}
	for _, f := range queueFamilies {
		family(b, f.name, f.kind, f.help)
		for i := range ov.Queues {
			q := &ov.Queues[i]
			sample(b, f.name, f.value(q), "type", q.Type, "priority", q.Priority)
		}
	}
	family(b, MetricWorkersRegistryUp, "gauge", "1 when the worker registry was read at this scrape.")
	sample(b, MetricWorkersRegistryUp, boolValue(ov.Registry))
	if ov.Registry {
		family(b, MetricWorkers, "gauge", "Live workers serving the queue, from the worker registry.")
		for i := range ov.Queues {
			q := &ov.Queues[i]
			sample(b, MetricWorkers, float64(q.Workers), "type", q.Type, "priority", q.Priority)
		}
	}
	family(b, MetricDeadLetters, "gauge", "Records in the dead-letter stream per task type.")
	types := make([]string, 0, len(ov.Dead))
	for t := range ov.Dead {
		types = append(types, t)
	}
	slices.Sort(types)
	for _, t := range types {
		sample(b, MetricDeadLetters, float64(ov.Dead[t]), "type", t)
	}
	family(b, MetricScheduledTasks, "gauge", "Delayed tasks waiting in schedules, all queues.")
	sample(b, MetricScheduledTasks, float64(ov.Scheduled))
	family(b, MetricCronSchedules, "gauge", "Repeating (cron) schedules.")
	sample(b, MetricCronSchedules, float64(ov.Cron))
	family(b, MetricBreakerState, "gauge", breakerStateDescriptions)
	for _, br := range brs {
		for _, s := range []breaker.State{breaker.StateClosed, breaker.StateHalfOpen, breaker.StateOpen} {
			sample(b, MetricBreakerState, boolValue(br.State == s.String()), "dependency", br.Dependency, "state", s.String())
		}
	}
}

func boolValue(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

func family(b *bytes.Buffer, name, kind, help string) {
	fmt.Fprintf(b, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, kind)
}

// sample writes one sample; labels are name, value pairs.
func sample(b *bytes.Buffer, name string, v float64, labels ...string) {
	b.WriteString(name)
	if len(labels) > 0 {
		b.WriteByte('{')
		for i := 0; i+1 < len(labels); i += 2 {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(labels[i])
			b.WriteString(`="`)
			b.WriteString(escapeLabel(labels[i+1]))
			b.WriteByte('"')
		}
		b.WriteByte('}')
	}
	b.WriteByte(' ')
	b.WriteString(strconv.FormatFloat(v, 'g', -1, 64))
	b.WriteByte('\n')
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
