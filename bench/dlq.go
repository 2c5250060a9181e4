package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
)

// ---- dlq ----

// Task types of the dead-letter figure.
const (
	typeDLQ      = "bench.dlq"      // poisoned tasks
	typeDLQOther = "bench.dlqother" // served by the routing worker, never enqueued
)

// dlqTasks is the number of poisoned tasks of the dead-letter figure (fewer
// with a smaller -n, for example with -quick).
const dlqTasks = 10000

// The paced part of the dead-letter figure: tasks poisoned one by one.
const (
	dlqPacedTasks = 2000
	dlqPacedRate  = 500 // tasks per second
)

// runDLQ measures the dead-letter router: tasks that die without their
// worker's help (the worker has dead letters off, as when a worker crashes
// on the last attempt) reach the dead-letter stream through the
// max-deliveries advisory, the advisory stream and the router of another
// worker. For each task it takes the time from the advisory's emission (its
// timestamp) to the storage of the task's record in the dead-letter stream
// (the record's stream timestamp), both server clocks. First 10,000 tasks
// are poisoned at once (a burst: the latency is mostly queueing behind the
// router), then 2,000 at 500 per second:
//
//	RESULT dlq tasks=10000 p50_ms=… p99_ms=… max_ms=… routed_per_s=…
//	RESULT dlq_paced tasks=2000 rate_per_s=500 p50_ms=… p99_ms=… max_ms=…
//
// routed_per_s is tasks over the time from the first advisory to the last
// record.
func (e *env) runDLQ(ctx context.Context, out io.Writer) error {
	n := min(dlqTasks, e.cfg.n)
	lat, rate, err := e.dlqRun(ctx, n, 0)
	if err != nil {
		return err
	}
	printResult(out, "dlq", fint("tasks", n), fms("p50_ms", ms(percentile(lat, 50))), fms("p99_ms", ms(percentile(lat, 99))),
		fms("max_ms", ms(percentile(lat, 100))), frate("routed_per_s", rate))
	n = min(dlqPacedTasks, e.cfg.n)
	lat, _, err = e.dlqRun(ctx, n, dlqPacedRate)
	if err != nil {
		return err
	}
	printResult(out, "dlq_paced", fint("tasks", n), fint("rate_per_s", dlqPacedRate), fms("p50_ms", ms(percentile(lat, 50))),
		fms("p99_ms", ms(percentile(lat, 99))), fms("max_ms", ms(percentile(lat, 100))))
	return nil
}

// dlqRun poisons n tasks, all at once (rate 0) or rate per second, waits for
// their records and returns the advisory-to-record latencies and the
// routing rate.
func (e *env) dlqRun(ctx context.Context, n, rate int) ([]time.Duration, float64, error) {
	dlqStream, err := e.js.Stream(ctx, e.names.DLQStream())
	if err != nil {
		return nil, 0, fmt.Errorf("bench: dead-letter stream: %w", err)
	}
	advStream, err := e.js.Stream(ctx, e.names.AdvisoryStream())
	if err != nil {
		return nil, 0, fmt.Errorf("bench: advisory stream: %w", err)
	}
	dlqSubject := e.names.DLQSubject(typeDLQ)
	advSubject := "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + e.names.TaskStream() + "." +
		e.names.ConsumerName(typeDLQ, framework.PriorityNormal)
	for _, s := range []struct {
		stream  jetstream.Stream
		subject string
	}{{dlqStream, dlqSubject}, {advStream, advSubject}} {
		if err := s.stream.Purge(ctx, jetstream.WithPurgeSubject(s.subject)); err != nil {
			return nil, 0, fmt.Errorf("bench: purge %s: %w", s.subject, err)
		}
	}

	// The routing worker: default settings, router on.
	router, stopRouter, err := e.newWorker()
	if err != nil {
		return nil, 0, err
	}
	router.HandleFunc(typeDLQOther, func(context.Context, *framework.Task) error { return nil })
	if err := router.Start(ctx); err != nil {
		_ = stopRouter()
		return nil, 0, err
	}
	defer func() { _ = stopRouter() }()
	// The failing worker: one attempt, no dead letters of its own.
	failing, stopFailing, err := e.newWorker(framework.WithDeadLetters(false))
	if err != nil {
		return nil, 0, err
	}
	failing.HandleFunc(typeDLQ, func(context.Context, *framework.Task) error { return errors.New("poisoned") },
		framework.WithMaxAttempts(1))
	if err := failing.Start(ctx); err != nil {
		_ = stopFailing()
		return nil, 0, err
	}
	defer func() { _ = stopFailing() }()

	if rate == 0 {
		e.progress("dlq: poisoning %d tasks at once", n)
		if err := e.enqueueJobs(ctx, typeDLQ, n, e.payload); err != nil {
			return nil, 0, err
		}
	} else {
		e.progress("dlq: poisoning %d tasks at %d/s", n, rate)
		nc, err := e.connect()
		if err != nil {
			return nil, 0, err
		}
		defer nc.Close()
		cl, err := framework.NewClient(nc)
		if err != nil {
			return nil, 0, err
		}
		if failed := e.paced(ctx, time.Second/time.Duration(rate), n, nil, func() error {
			_, err := cl.Enqueue(ctx, typeDLQ, e.payload)
			return err
		}); failed > 0 {
			return nil, 0, fmt.Errorf("bench: %d enqueues failed", failed)
		}
	}
	deadline := time.Now().Add(e.cfg.timeout)
	for {
		info, err := dlqStream.Info(ctx, jetstream.WithSubjectFilter(dlqSubject))
		if err != nil {
			return nil, 0, fmt.Errorf("bench: dead-letter stream info: %w", err)
		}
		if got := int(info.State.Subjects[dlqSubject]); got >= n {
			break
		} else if time.Now().After(deadline) {
			return nil, 0, fmt.Errorf("bench: %d of %d tasks dead-lettered after %v", got, n, e.cfg.timeout)
		}
		select {
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}

	// Advisory emission time by task sequence.
	emitted := make(map[uint64]time.Time, n)
	var first time.Time
	if err := readAll(ctx, advStream, advSubject, n, func(m jetstream.Msg) error {
		var adv struct {
			Time time.Time `json:"timestamp"`
			Seq  uint64    `json:"stream_seq"`
		}
		if err := json.Unmarshal(m.Data(), &adv); err != nil {
			return err
		}
		emitted[adv.Seq] = adv.Time
		if first.IsZero() || adv.Time.Before(first) {
			first = adv.Time
		}
		return nil
	}); err != nil {
		return nil, 0, fmt.Errorf("bench: read advisories: %w", err)
	}
	lat := make([]time.Duration, 0, n)
	var last time.Time
	missing := 0
	if err := readAll(ctx, dlqStream, dlqSubject, n, func(m jetstream.Msg) error {
		md, err := m.Metadata()
		if err != nil {
			return err
		}
		seq, err := strconv.ParseUint(m.Headers().Get(dlq.HeaderOriginalSeq), 10, 64)
		if err != nil {
			return err
		}
		at, ok := emitted[seq]
		if !ok {
			missing++
			return nil
		}
		lat = append(lat, md.Timestamp.Sub(at))
		if md.Timestamp.After(last) {
			last = md.Timestamp
		}
		return nil
	}); err != nil {
		return nil, 0, fmt.Errorf("bench: read dead letters: %w", err)
	}
	if missing > 0 || len(lat) != n {
		return nil, 0, fmt.Errorf("bench: %d records, %d without an advisory; want %d", len(lat)+missing, missing, n)
	}
	if err := dlqStream.Purge(ctx, jetstream.WithPurgeSubject(dlqSubject)); err != nil {
		return nil, 0, fmt.Errorf("bench: purge %s: %w", dlqSubject, err)
	}
	return lat, float64(n) / last.Sub(first).Seconds(), nil
}

// readAll reads the n messages of subject in stream with an ordered consumer.
func readAll(ctx context.Context, s jetstream.Stream, subject string, n int, fn func(jetstream.Msg) error) error {
	c, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return err
	}
	it, err := c.Messages()
	if err != nil {
		return err
	}
	defer it.Stop()
	for range n {
		m, err := it.Next(jetstream.NextMaxWait(30 * time.Second))
		if err != nil {
			return err
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return nil
}
