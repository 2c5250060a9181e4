package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// figureEnqueueOne compares sequential enqueues, each waiting for its
// acknowledgement before the next: raw PublishMsg with a Nats-Msg-Id against
// Client.Enqueue.
func (e *env) figureEnqueueOne(ctx context.Context, out io.Writer) error {
	return e.compare(ctx, out, figEnqueueOne, e.fresh(e.enqueueOneRaw), e.fresh(e.enqueueOneJetflow), fint("n", e.cfg.oneN))
}

func (e *env) enqueueOneRaw(ctx context.Context) (runResult, error) {
	n := e.cfg.oneN
	subject := e.names.TaskSubject(streams.PriorityNormal, typeRawEnq)
	nc, err := e.connect()
	if err != nil {
		return runResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return runResult{}, err
	}
	tm := startTimer()
	for range n {
		m := &nats.Msg{Subject: subject, Data: e.payload, Header: nats.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}}
		if _, err := js.PublishMsg(ctx, m); err != nil {
			return runResult{}, fmt.Errorf("bench: raw publish: %w", err)
		}
	}
	res := tm.result(n)
	return res, e.checkStored(ctx, subject, n)
}

func (e *env) enqueueOneJetflow(ctx context.Context) (runResult, error) {
	n := e.cfg.oneN
	nc, err := e.connect()
	if err != nil {
		return runResult{}, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, e.jfClientOpts...)
	if err != nil {
		return runResult{}, err
	}
	var payload any = e.payload
	tm := startTimer()
	for range n {
		if _, err := cl.Enqueue(ctx, typeEnqueue, payload); err != nil {
			return runResult{}, err
		}
	}
	res := tm.result(n)
	return res, e.checkStored(ctx, e.names.TaskSubject(streams.PriorityNormal, typeEnqueue), n)
}

// ---- latency at higher rates ----

// figureLatencyAt is the latency figure at rate tasks per second, paced in
// bursts (see burstPaced) because a ticker cannot tick every 50 µs.
func (e *env) figureLatencyAt(ctx context.Context, out io.Writer, figure string, rate int) error {
	var p50s, p99s, achieved, rawP50s, rawP99s, cpus, rawCPUs []float64
	var sendMax, rawSendMax time.Duration // longest single send of all runs
	var slow, rawSlow int                 // sends of slowSend or more, all runs
	measured := 0
	for r := 1; r <= e.cfg.runs; r++ {
		raw, err := e.latencyRawRun(ctx, rate)
		if err != nil {
			return fmt.Errorf("run %d, raw: %w", r, err)
		}
		e.progress("%s run %d/%d raw: %d messages at %.0f/s, p50 %.2f ms, p99 %.2f ms, CPU %.1f µs/task, longest send %.1f ms",
			figure, r, e.cfg.runs, raw.measured, raw.achieved, ms(raw.p50), ms(raw.p99), usOf(raw.cpu), ms(raw.sends.max))
		res, err := e.latencyRateRun(ctx, rate)
		if err != nil {
			return fmt.Errorf("run %d: %w", r, err)
		}
		e.progress("%s run %d/%d: %d tasks at %.0f/s (asked %d/s), p50 %.2f ms, p99 %.2f ms, CPU %.1f µs/task, longest send %.1f ms",
			figure, r, e.cfg.runs, res.measured, res.achieved, rate, ms(res.p50), ms(res.p99), usOf(res.cpu), ms(res.sends.max))
		sendMax, rawSendMax = max(sendMax, res.sends.max), max(rawSendMax, raw.sends.max)
		slow, rawSlow = slow+res.sends.slow, rawSlow+raw.sends.slow
		p50s, p99s, achieved = append(p50s, ms(res.p50)), append(p99s, ms(res.p99)), append(achieved, res.achieved)
		rawP50s, rawP99s = append(rawP50s, ms(raw.p50)), append(rawP99s, ms(raw.p99))
		cpus, rawCPUs = append(cpus, usOf(res.cpu)), append(rawCPUs, usOf(raw.cpu))
		measured = res.measured
	}
	printResult(out, figure, fint("rate_per_s", rate), fms("p50_ms", median(p50s)), fms("p99_ms", median(p99s)),
		frate("achieved_per_s", median(achieved)), fint("samples", measured),
		fms("raw_p50_ms", median(rawP50s)), fms("raw_p99_ms", median(rawP99s)),
		fcpu("cpu_us", median(cpus)), fcpu("raw_cpu_us", median(rawCPUs)),
		fms("max_send_ms", ms(sendMax)), fint("slow_sends", slow), fms("raw_max_send_ms", ms(rawSendMax)), fint("raw_slow_sends", rawSlow),
		fint("runs", e.cfg.runs))
	return nil
}

// latencyRawRun is the raw reference of latencyRateRun: the same pacing and
// payload, each message published with PublishMsg (waiting for its
// acknowledgement, with a unique Nats-Msg-Id as a task carries) on one
// connection, read on another by Consume with nats.go's defaults and
// explicit acks, through a consumer with jetflow's configuration. The
// latency is publish → receipt in the callback.
func (e *env) latencyRawRun(ctx context.Context, rate int) (latencyResult, error) {
	total := int(int64(rate) * int64(e.cfg.latencyWarmup+e.cfg.latencyDur) / int64(time.Second))
	subject := e.names.TaskSubject(streams.PriorityNormal, typeRawLat)
	if _, err := topology.EnsureConsumer(ctx, e.js, e.names, topology.ConsumerSpec{TaskType: typeRawLat}); err != nil {
		return latencyResult{}, err
	}
	cnc, err := e.connect()
	if err != nil {
		return latencyResult{}, err
	}
	defer cnc.Close()
	cjs, err := jetstream.New(cnc)
	if err != nil {
		return latencyResult{}, err
	}
	name := e.names.ConsumerName(typeRawLat, streams.PriorityNormal)
	cons, err := cjs.Consumer(ctx, e.names.TaskStream(), name)
	if err != nil {
		return latencyResult{}, fmt.Errorf("bench: consumer %s: %w", name, err)
	}
	t0 := time.Now()
	rec := newRecorder(total)
	var bad atomic.Int64
	cc, err := cons.Consume(func(msg jetstream.Msg) {
		now := time.Since(t0)
		sent, err := strconv.ParseInt(string(msg.Data()), 10, 64)
		if err != nil {
			bad.Add(1)
		}
		if err := msg.Ack(); err != nil {
			bad.Add(1)
		}
		rec.add(sample{sent: time.Duration(sent), lat: now - time.Duration(sent)})
	})
	if err != nil {
		return latencyResult{}, fmt.Errorf("bench: consume: %w", err)
	}
	defer cc.Stop()
	pnc, err := e.connect()
	if err != nil {
		return latencyResult{}, err
	}
	defer pnc.Close()
	pjs, err := jetstream.New(pnc)
	if err != nil {
		return latencyResult{}, err
	}
	firstSend := time.Since(t0)
	start, cpu0 := time.Now(), processCPU()
	failed, times := burstPaced(ctx, rate, total, func() error {
		sent := time.Since(t0)
		m := &nats.Msg{Subject: subject, Data: strconv.AppendInt(nil, int64(sent), 10),
			Header: nats.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}}
		_, err := pjs.PublishMsg(ctx, m)
		return err
	})
	sending := time.Since(start)
	rec.expect(total - failed)
	if err := e.waitFor(ctx, rec.done, "raw latency messages"); err != nil {
		return latencyResult{}, err
	}
	cpu := (processCPU() - cpu0) / time.Duration(total)
	if failed > 0 || bad.Load() > 0 {
		return latencyResult{}, fmt.Errorf("bench: %d raw publishes failed, %d bad or unacknowledged messages", failed, bad.Load())
	}
	lats := rec.latencies(firstSend + e.cfg.latencyWarmup)
	return latencyResult{p50: percentile(lats, 50), p99: percentile(lats, 99), measured: len(lats),
		achieved: float64(total) / sending.Seconds(), cpu: cpu, sends: times}, nil
}

type latencyResult struct {
	p50, p99 time.Duration
	measured int
	achieved float64       // enqueues per second actually sent
	cpu      time.Duration // process CPU time per task, sending and handling
	sends    sendTimes
}

// latencyRateRun enqueues tasks at rate per second for the warm-up and the
// measured duration, each Enqueue in its own goroutine, with a worker
// running, and measures enqueue→handler start of the tasks sent after the
// warm-up.
func (e *env) latencyRateRun(ctx context.Context, rate int) (latencyResult, error) {
	total := int(int64(rate) * int64(e.cfg.latencyWarmup+e.cfg.latencyDur) / int64(time.Second))
	t0 := time.Now()
	rec := newRecorder(total)
	w, stop, err := e.newWorker(e.tracking())
	if err != nil {
		return latencyResult{}, err
	}
	w.HandleFunc(typeLatency, stampHandler(t0, rec))
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return latencyResult{}, err
	}
	nc, err := e.connect()
	if err != nil {
		_ = stop()
		return latencyResult{}, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, e.tracking())
	if err != nil {
		_ = stop()
		return latencyResult{}, err
	}
	firstSend := time.Since(t0)
	start, cpu0 := time.Now(), processCPU()
	failed, times := burstPaced(ctx, rate, total, func() error {
		return stampedEnqueue(ctx, cl, t0, typeLatency)
	})
	sending := time.Since(start)
	rec.expect(total - failed)
	werr := e.waitFor(ctx, rec.done, "latency tasks")
	cpu := (processCPU() - cpu0) / time.Duration(total)
	if err := errors.Join(werr, stop()); err != nil {
		return latencyResult{}, err
	}
	if failed > 0 {
		return latencyResult{}, fmt.Errorf("bench: %d enqueues failed", failed)
	}
	lats := rec.latencies(firstSend + e.cfg.latencyWarmup)
	return latencyResult{p50: percentile(lats, 50), p99: percentile(lats, 99), measured: len(lats),
		achieved: float64(total) / sending.Seconds(), cpu: cpu, sends: times}, nil
}

// burstPaced calls send total times at rate per second, each in its own
// goroutine: every millisecond it starts the sends that are due by then, so
// the rate holds even when the machine delays a tick. It returns, once all
// have returned, the number of failed sends and how long sends took.
func burstPaced(ctx context.Context, rate, total int, send func() error) (int, sendTimes) {
	var failed atomic.Int64
	var times sendTimes
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	sent := 0
	timed := func() {
		t := time.Now()
		if err := send(); err != nil {
			failed.Add(1)
		}
		d := time.Since(t)
		mu.Lock()
		times.add(d)
		mu.Unlock()
	}
	for sent < total {
		select {
		case <-tick.C:
		case <-ctx.Done():
			wg.Wait()
			return int(failed.Load()) + total - sent, times
		}
		due := min(int(time.Since(start).Seconds()*float64(rate))+1, total)
		for ; sent < due; sent++ {
			wg.Go(timed)
		}
	}
	wg.Wait()
	return int(failed.Load()), times
}

// slowSend is the send time from which sendTimes counts a send as slow: far
// above any acknowledgement on a working server, and half the per-attempt
// timeout after which jetflow's client publishes a task again
// (internal/jsapi.PublishAttemptTimeout).
const slowSend = time.Second

// sendTimes sums up the durations of a run's sends, acknowledgement
// included: the longest, and how many took slowSend or more. A sender whose
// rate collapses shows here whether single sends stalled.
type sendTimes struct {
	max  time.Duration
	slow int
}

func (t *sendTimes) add(d time.Duration) {
	t.max = max(t.max, d)
	if d >= slowSend {
		t.slow++
	}
}
