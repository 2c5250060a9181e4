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

// Header modes of raw publishes (publishRaw).
const (
	rawMsgID    = "msgid" // a unique Nats-Msg-Id, deduplicated like jetflow's task IDs
	rawPlainID  = "id"    // a unique ID in a plain header
	rawNoHeader = ""      // no header block
)

// Ways the raw side consumes, as printed in raw=… of the drain figures.
const (
	rawConsume  = "consume"  // Consumer.Consume, nats.go defaults, ack in the callback
	rawMessages = "messages" // Consumer.Messages, default batch, -concurrency goroutines calling Next
)

// rawNextPoll bounds each Next of the raw Messages side, as the jetflow
// worker does: without it, a nats.go race can leave the iterator with no pull
// request outstanding for 30 s on a busy machine.
const rawNextPoll = 250 * time.Millisecond

// drainRaw returns the raw drain rate (the faster of Consume and Messages).
func (e *env) drainRaw(ctx context.Context) (float64, error) {
	r, err := e.drainRawRun(ctx)
	return r.rate, err
}

// drainRawRun measures the raw drain both ways a nats.go user would write
// it, each on its own n pre-enqueued messages, and returns the faster, with
// both rates in variants.
func (e *env) drainRawRun(ctx context.Context) (runResult, error) {
	return e.drainRawBoth(ctx, e.cfg.rawHeader)
}

// drainRawBoth is drainRawRun for messages published with the given header
// mode (see publishRaw).
func (e *env) drainRawBoth(ctx context.Context, header string) (runResult, error) {
	c, err := e.drainRawWith(ctx, rawConsume, header)
	if err != nil {
		return runResult{}, fmt.Errorf("%s: %w", rawConsume, err)
	}
	m, err := e.drainRawWith(ctx, rawMessages, header)
	if err != nil {
		return runResult{}, fmt.Errorf("%s: %w", rawMessages, err)
	}
	best := c
	if m.rate > c.rate {
		best = m
	}
	best.variants = map[string]float64{rawConsume: c.rate, rawMessages: m.rate}
	return best, nil
}

// drainRawWithDedup is drainRawRun followed, when the raw messages carry
// no Nats-Msg-Id (the default), by the same raw drain of messages that
// carry one, as every jetflow task does by default: its result goes in
// dedup, the reference of the figure's ratio_dedup. The server keeps the
// ID of every message stored within the stream's duplicate window, and in
// the embedded figures that table lives in the bench's own heap.
//
// Each of its two drains (Consume, then Messages) runs on a stream of its
// own, a copy of the task stream's configuration created for it and deleted
// after it: the server drops a stream's ID table with the stream, so each
// starts with an empty table, as the other drains of the figure do (see
// env.fresh), and leaves no IDs in the heap of the drains that follow.
func (e *env) drainRawWithDedup(ctx context.Context) (runResult, error) {
	r, err := e.drainRawRun(ctx)
	if err != nil || e.cfg.rawHeader != rawNoHeader {
		return r, err
	}
	var d runResult
	d.variants = map[string]float64{}
	for _, how := range []string{rawConsume, rawMessages} {
		v, err := e.onOwnStream(ctx, func(o *env) (runResult, error) { return o.drainRawWith(ctx, how, rawMsgID) })
		if err != nil {
			return runResult{}, fmt.Errorf("%s with Nats-Msg-Id: %w", how, err)
		}
		d.variants[how] = v.rate
		if v.rate > d.rate {
			d.rate, d.cpu, d.how = v.rate, v.cpu, how
		}
	}
	r.dedup = &d
	return r, nil
}

// dedupPrefix names the stream of onOwnStream.
const dedupPrefix = "rawdedup"

// onOwnStream runs fn on a copy of e whose task stream is a new stream
// with the task stream's configuration, deleted when fn returns.
func (e *env) onOwnStream(ctx context.Context, fn func(*env) (runResult, error)) (runResult, error) {
	info, err := e.stream.Info(ctx)
	if err != nil {
		return runResult{}, err
	}
	o := *e
	o.names = streams.MustNames(dedupPrefix)
	cfg := info.Config
	cfg.Name, cfg.Subjects, cfg.Sources, cfg.Mirror = o.names.TaskStream(), []string{o.names.TaskWildcard()}, nil, nil
	_ = e.js.DeleteStream(ctx, cfg.Name) // left by an interrupted run
	if o.stream, err = e.js.CreateStream(ctx, cfg); err != nil {
		return runResult{}, fmt.Errorf("bench: stream %s: %w", cfg.Name, err)
	}
	defer func() { _ = e.js.DeleteStream(context.WithoutCancel(ctx), cfg.Name) }()
	return fn(&o)
}

// drainRawWith pre-enqueues n messages (with the header mode of
// publishRaw) with asynchronous publishes and
// times their drain through a durable pull consumer with jetflow's
// configuration (topology.ConsumerConfig: explicit ack, MaxAckPending 1000),
// read the given way with nats.go's defaults.
func (e *env) drainRawWith(ctx context.Context, how, header string) (runResult, error) {
	n := e.cfg.n
	subject := e.names.TaskSubject(streams.PriorityNormal, typeRawDrain)
	spec := topology.ConsumerSpec{TaskType: typeRawDrain}
	if _, err := topology.EnsureConsumer(ctx, e.js, e.names, spec); err != nil {
		return runResult{}, err
	}
	if _, err := e.publishRaw(ctx, subject, n, header); err != nil {
		return runResult{}, err
	}
	nc, err := e.connect()
	if err != nil {
		return runResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return runResult{}, err
	}
	name := e.names.ConsumerName(typeRawDrain, streams.PriorityNormal)
	var done, ackErrs atomic.Int64
	finished := make(chan struct{})
	handle := func(msg jetstream.Msg) {
		if err := msg.Ack(); err != nil {
			ackErrs.Add(1)
		}
		if done.Add(1) == int64(n) {
			close(finished)
		}
	}

	tm := startTimer()
	cons, err := js.Consumer(ctx, e.names.TaskStream(), name)
	if err != nil {
		return runResult{}, fmt.Errorf("bench: consumer %s: %w", name, err)
	}
	var stopReading func()
	switch how {
	case rawConsume:
		cc, err := cons.Consume(handle)
		if err != nil {
			return runResult{}, fmt.Errorf("bench: consume: %w", err)
		}
		stopReading = cc.Stop
	case rawMessages:
		if stopReading, err = readMessages(cons, e.cfg.concurrency, handle); err != nil {
			return runResult{}, err
		}
	default:
		return runResult{}, fmt.Errorf("bench: unknown raw consumer %q", how)
	}
	unwatch := e.watch(&done, name)
	werr := e.waitFor(ctx, finished, "the raw drain")
	res := tm.result(n)
	res.how = how
	unwatch()
	stopReading()
	if werr != nil {
		return runResult{}, werr
	}
	if k := ackErrs.Load(); k > 0 {
		return runResult{}, fmt.Errorf("bench: %d raw acks failed", k)
	}
	if err := e.waitConsumerEmpty(ctx, name); err != nil {
		return runResult{}, err
	}
	return res, nil
}

// readMessages reads cons the raw Messages way: the iterator with nats.go's
// defaults, n goroutines calling Next (bounded by rawNextPoll) and handing
// each message to handle. stop ends the iterator and waits for the
// goroutines.
func readMessages(cons jetstream.Consumer, n int, handle func(jetstream.Msg)) (stop func(), err error) {
	it, err := cons.Messages()
	if err != nil {
		return nil, fmt.Errorf("bench: messages: %w", err)
	}
	var wg sync.WaitGroup
	poll := jetstream.NextMaxWait(rawNextPoll)
	for range n {
		wg.Go(func() {
			for {
				msg, err := it.Next(poll)
				if errors.Is(err, nats.ErrTimeout) {
					continue
				}
				if err != nil {
					return
				}
				handle(msg)
			}
		})
	}
	return func() { it.Stop(); wg.Wait() }, nil
}

// publishRaw publishes n copies of the payload to subject with
// PublishMsgAsync on a fresh connection, with the given header mode (rawMsgID,
// rawPlainID or rawNoHeader).
func (e *env) publishRaw(ctx context.Context, subject string, n int, header string) (runResult, error) {
	return e.publishRawMsgs(ctx, n, func(int) *nats.Msg {
		m := &nats.Msg{Subject: subject, Data: e.payload}
		switch header {
		case rawMsgID:
			m.Header = nats.Header{jetstream.MsgIDHeader: []string{nuid.Next()}}
		case rawPlainID:
			m.Header = nats.Header{framework.HeaderTaskID: []string{nuid.Next()}}
		}
		return m
	})
}

// publishRawMsgs publishes the n messages made by next with PublishMsgAsync
// on a fresh connection, at most cfg.window in flight, and checks every
// acknowledgement as it arrives (memory for the window only, as a careful
// user writes it). It returns how long that took.
func (e *env) publishRawMsgs(ctx context.Context, n int, next func(i int) *nats.Msg) (runResult, error) {
	nc, err := e.connect()
	if err != nil {
		return runResult{}, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(e.cfg.window))
	if err != nil {
		return runResult{}, err
	}
	var failed atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) {
		failed.Add(1)
		once.Do(func() { firstErr = err })
	}
	futures := make(chan jetstream.PubAckFuture, e.cfg.window)
	settled := make(chan struct{})
	tm := startTimer()
	go func() {
		defer close(settled)
		for f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				fail(err)
			case <-ctx.Done():
				fail(ctx.Err())
			}
		}
	}()
	for i := range n {
		m := next(i)
		f, err := js.PublishMsgAsync(m)
		for errors.Is(err, jetstream.ErrTooManyStalledMsgs) && ctx.Err() == nil {
			f, err = js.PublishMsgAsync(m) // window full for 200 ms: wait more, as EnqueueMany does
		}
		if err != nil {
			fail(err)
			continue
		}
		futures <- f
	}
	close(futures)
	<-settled
	res := tm.result(n)
	if k := failed.Load(); k > 0 {
		return runResult{}, fmt.Errorf("bench: %d of %d raw publishes failed, first: %w", k, n, firstErr)
	}
	return res, nil
}

// ---- enqueue_one ----

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
