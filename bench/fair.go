package main

import (
	"context"
	"errors"
	"fmt"
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
