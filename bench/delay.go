package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// ---- delay ----

func (e *env) figureDelay(ctx context.Context, out io.Writer) error {
	var p50s, p99s, maxs, rawP99s, firedP99s []float64
	early := 0
	for r := 1; r <= e.cfg.runs; r++ {
		fired, rawStart, err := e.delayRaw(ctx)
		if err != nil {
			return fmt.Errorf("raw run %d: %w", r, err)
		}
		firedP99, rawP99 := percentile(fired, 99), percentile(rawStart, 99)
		e.progress("delay run %d/%d raw: %d schedules fired p50 %.2f ms, p99 %.2f ms late; received p99 %.2f ms late",
			r, e.cfg.runs, e.cfg.delayTasks, ms(percentile(fired, 50)), ms(firedP99), ms(rawP99))
		res, err := e.delayRun(ctx)
		if err != nil {
			return fmt.Errorf("jetflow run %d: %w", r, err)
		}
		e.progress("delay run %d/%d jetflow: %d tasks due %s, early %d, p50 %.2f ms, p99 %.2f ms, max %.2f ms",
			r, e.cfg.runs, e.cfg.delayTasks, res.due.Format("15:04:05.000"), res.early, ms(res.p50), ms(res.p99), ms(res.max))
		p50s, p99s, maxs = append(p50s, ms(res.p50)), append(p99s, ms(res.p99)), append(maxs, ms(res.max))
		rawP99s, firedP99s = append(rawP99s, ms(rawP99)), append(firedP99s, ms(firedP99))
		early += res.early
	}
	// Early starts are summed over all runs: one is one too many.
	printResult(out, figDelay, fint("tasks", e.cfg.delayTasks), fint("early", early), fms("p50_ms", median(p50s)),
		fms("p99_ms", median(p99s)), fms("max_ms", median(maxs)), fms("fired_p99_ms", median(firedP99s)),
		fms("raw_p99_ms", median(rawP99s)), fint("runs", e.cfg.runs))
	return nil
}

// delayRaw is the raw side of the delay figure: cfg.delayTasks schedule
// messages (Nats-Schedule "@at", nanosecond precision) due the same instant,
// targeting a subject read by a plain pull consumer (cfg.concurrency
// goroutines that take and ack). For each message it returns how late the
// server stored the fired message (its stream timestamp) and how late a
// goroutine received it, both relative to the due time.
func (e *env) delayRaw(ctx context.Context) (fired, received []time.Duration, err error) {
	n := e.cfg.delayTasks
	// Schedules fire into the schedule stream's staging subject, which the
	// task stream sources onto the work subject.
	target := e.names.FiredSubject(streams.PriorityNormal, typeRawDelay)
	spec := topology.ConsumerSpec{TaskType: typeRawDelay}
	if _, err := topology.EnsureConsumer(ctx, e.js, e.names, spec); err != nil {
		return nil, nil, err
	}
	nc, err := e.connect()
	if err != nil {
		return nil, nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, nil, err
	}
	cons, err := js.Consumer(ctx, e.names.TaskStream(), e.names.ConsumerName(typeRawDelay, streams.PriorityNormal))
	if err != nil {
		return nil, nil, err
	}
	due := time.Now().Add(e.cfg.delayLead).Truncate(time.Second).Add(time.Second)
	var mu sync.Mutex
	fired = make([]time.Duration, 0, n)
	received = make([]time.Duration, 0, n)
	finished := make(chan struct{})
	stopReading, err := readMessages(cons, e.cfg.concurrency, func(msg jetstream.Msg) {
		now := time.Now()
		md, mdErr := msg.Metadata()
		_ = msg.Ack()
		mu.Lock()
		received = append(received, now.Sub(due))
		if mdErr == nil {
			fired = append(fired, md.Timestamp.Sub(due))
		}
		if len(received) == n {
			close(finished)
		}
		mu.Unlock()
	})
	if err != nil {
		return nil, nil, err
	}
	at := "@at " + due.UTC().Format(time.RFC3339Nano)
	_, perr := e.publishRawMsgs(ctx, n, func(int) *nats.Msg {
		return &nats.Msg{Subject: e.names.ScheduleSubject(nuid.Next()), Data: e.payload, Header: nats.Header{
			jetstream.ScheduleHeader:       []string{at},
			jetstream.ScheduleTargetHeader: []string{target},
		}}
	})
	werr := perr
	if werr == nil {
		werr = e.waitFor(ctx, finished, "raw delayed messages")
	}
	stopReading()
	if werr != nil {
		return nil, nil, werr
	}
	mu.Lock()
	defer mu.Unlock()
	return fired, received, nil
}

type delayResult struct {
	due           time.Time
	early         int
	p50, p99, max time.Duration
}

// delayRun enqueues cfg.delayTasks tasks with At(due), due the same instant
// (a whole second at least cfg.delayLead ahead), and measures how late each
// handler starts relative to Task.ScheduledFor.
func (e *env) delayRun(ctx context.Context) (delayResult, error) {
	n := e.cfg.delayTasks
	var mu sync.Mutex
	lateness := make([]time.Duration, 0, n)
	early, unscheduled := 0, 0
	finished := make(chan struct{})
	w, stop, err := e.newWorker(e.tracking())
	if err != nil {
		return delayResult{}, err
	}
	w.HandleFunc(typeDelay, func(_ context.Context, t *framework.Task) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if t.ScheduledFor.IsZero() {
			unscheduled++
		}
		late := now.Sub(t.ScheduledFor)
		if late < 0 {
			early++
		}
		lateness = append(lateness, late)
		if len(lateness) == n {
			close(finished)
		}
		return nil
	})
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return delayResult{}, err
	}
	due := time.Now().Add(e.cfg.delayLead).Truncate(time.Second).Add(time.Second)
	if err := e.enqueueJobsClient(ctx, []framework.ClientOption{e.tracking()}, typeDelay, n, e.payload, framework.At(due)); err != nil {
		_ = stop()
		return delayResult{}, err
	}
	if late := time.Since(due); late > 0 {
		e.progress("delay: warning: enqueueing %d tasks ended %v after their due time", n, late)
	}
	werr := e.waitFor(ctx, finished, "delayed tasks")
	if err := errors.Join(werr, stop()); err != nil {
		return delayResult{}, err
	}
	mu.Lock()
	defer mu.Unlock()
	if unscheduled > 0 {
		return delayResult{}, fmt.Errorf("bench: %d delayed tasks arrived without ScheduledFor", unscheduled)
	}
	res := delayResult{due: due, early: early}
	res.p50 = percentile(lateness, 50)
	res.p99 = percentile(lateness, 99)
	res.max = lateness[len(lateness)-1] // sorted by percentile
	return res, nil
}
