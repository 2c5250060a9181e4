package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The raw chain is the workflow figure's floor: what a competent nats.go
// user gets for a chain of wfBenchSteps no-op steps when each step is a
// message and nothing else. A step's handler publishes the next step's
// message (PublishMsg with a deterministic Nats-Msg-Id, waiting for the
// acknowledgement, so that the next step is stored before this one is
// acknowledged), then acknowledges its own. Its doc variant also writes one
// state document per step, as a durable workflow must (PublishMsg to a
// stream with MaxMsgsPerSubject 1, waiting for the acknowledgement, before
// the next step's message), without reading it back and without any guard.
// Its async variant publishes the next step with PublishMsgAsync from a
// Consume callback (rawChainAsync). Each is compared with a drain of single
// messages on the same stream, in the same round, read both ways (Consume
// and Messages; the faster counts):
//
//	raw_chain_step_ratio       = raw chain steps/s ÷ raw single messages/s
//	raw_async_chain_step_ratio = asynchronous raw chain steps/s ÷ raw single messages/s
//	raw_doc_chain_step_ratio   = raw chain with a document per step, steps/s ÷ raw single messages/s
//
// The workflow figure's step_ratio target (0.5) asks jetflow's steps, which
// also read the run document and guard its write, to beat these.

const (
	rawChainStream = "RAWCHAIN"
	rawChainDocs   = "RAWCHAIN_DOCS"
	rawChainSteps  = "rawchain.step" // rawchain.step.<step>.<run>
	rawChainDoc    = "rawchain.doc"  // rawchain.doc.<run>
	rawChainSingle = "rawchain.single"
)

// rawChainResult is one round of the raw chain: the single-message drain
// and the three chains, in steps (messages) per second.
type rawChainResult struct {
	single, chain, docChain, asyncChain float64
}

// rawChainAsync is the third way rawChainRun reads: a Consume callback that
// publishes the next step with PublishMsgAsync and leaves the
// acknowledgement of its own message to one goroutine, which acks each
// message once its next step's publish was acknowledged, in order.
const rawChainAsync = "async"

// rawChainRound measures one round on streams created for it and deleted
// after it.
func (e *env) rawChainRound(ctx context.Context, runs int) (rawChainResult, error) {
	for _, cfg := range []jetstream.StreamConfig{
		{Name: rawChainStream, Subjects: []string{rawChainSteps + ".>", rawChainSingle}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage},
		{Name: rawChainDocs, Subjects: []string{rawChainDoc + ".>"}, MaxMsgsPerSubject: 1, Storage: jetstream.FileStorage},
	} {
		_ = e.js.DeleteStream(ctx, cfg.Name) // left by an interrupted run
		if _, err := e.js.CreateStream(ctx, cfg); err != nil {
			return rawChainResult{}, fmt.Errorf("bench: stream %s: %w", cfg.Name, err)
		}
		defer func() { _ = e.js.DeleteStream(context.WithoutCancel(ctx), cfg.Name) }()
	}
	var res rawChainResult
	// The single messages are drained both ways, as in the drain figure,
	// and the faster counts.
	for _, how := range []string{rawConsume, rawMessages} {
		r, err := e.rawChainRun(ctx, runs, rawChainSingle, false, how)
		if err != nil {
			return res, fmt.Errorf("single (%s): %w", how, err)
		}
		res.single = max(res.single, r)
	}
	var err error
	if res.chain, err = e.rawChainRun(ctx, runs, rawChainSteps, false, rawMessages); err != nil {
		return res, fmt.Errorf("chain: %w", err)
	}
	if res.docChain, err = e.rawChainRun(ctx, runs, rawChainSteps, true, rawMessages); err != nil {
		return res, fmt.Errorf("doc chain: %w", err)
	}
	if res.asyncChain, err = e.rawChainRun(ctx, runs, rawChainSteps, false, rawChainAsync); err != nil {
		return res, fmt.Errorf("async chain: %w", err)
	}
	return res, nil
}

// rawChainRun pre-publishes the first messages and times the drain of
// wfBenchSteps×runs messages: runs chains on rawChainSteps (docs: with a
// document per step), or that many single messages on rawChainSingle. It
// reads the given way: rawMessages as the raw Messages drain does
// (cfg.concurrency goroutines calling Next), which the synchronous chains
// need since each step's handler waits for a publish (in a Consume callback
// the steps would run one at a time); rawConsume, a Consume callback with
// nats.go's defaults; or rawChainAsync. It returns messages per second.
func (e *env) rawChainRun(ctx context.Context, runs int, subject string, docs bool, how string) (float64, error) {
	total := wfBenchSteps * runs
	chain := subject == rawChainSteps
	// Message IDs differ between the chains of a round: the stream's
	// duplicate window would drop a later chain's messages otherwise.
	tag := "c"
	switch {
	case docs:
		tag = "d"
	case how == rawChainAsync:
		tag = "a"
	}
	first := func(i int) *nats.Msg {
		if !chain {
			return &nats.Msg{Subject: rawChainSingle, Data: []byte("{}")}
		}
		run := tag + strconv.Itoa(i)
		return &nats.Msg{Subject: rawChainSteps + ".1." + run, Data: []byte("{}"),
			Header: nats.Header{jetstream.MsgIDHeader: []string{run + ".1"}}}
	}
	n := total
	if chain {
		n = runs
	}
	if _, err := e.publishRawMsgs(ctx, n, first); err != nil {
		return 0, err
	}
	nc, err := e.connect()
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	name, filter := "rawsingle", subject
	if chain {
		name, filter = "rawchain", subject+".>"
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, rawChainStream, jetstream.ConsumerConfig{
		Durable: name, FilterSubject: filter,
		AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1000,
	})
	if err != nil {
		return 0, fmt.Errorf("bench: consumer %s: %w", name, err)
	}
	// finished closes at the last step, or at the first failure: a step
	// that failed never comes back, and the wait must not run into its
	// timeout for it.
	var done, failed atomic.Int64
	finished := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(finished) }) }
	fail := func() { failed.Add(1); end() }
	count := func() {
		if done.Add(1) == int64(total) {
			end()
		}
	}
	step := func(msg jetstream.Msg) error {
		if chain {
			k, run, err := parseStep(msg.Subject())
			if err != nil {
				return err
			}
			if docs {
				doc := &nats.Msg{Subject: rawChainDoc + "." + run, Data: []byte(`{"step":` + strconv.Itoa(k) + `}`)}
				if _, err := js.PublishMsg(ctx, doc); err != nil {
					return err
				}
			}
			if next := nextStep(k, run); next != nil {
				if _, err := js.PublishMsg(ctx, next); err != nil {
					return err
				}
			}
		}
		return msg.Ack()
	}
	handle := func(msg jetstream.Msg) {
		if err := step(msg); err != nil {
			fail()
			return
		}
		count()
	}
	tm := startTimer()
	var stop func()
	if how == rawChainAsync {
		type settle struct {
			msg jetstream.Msg
			f   jetstream.PubAckFuture // nil: the last step, nothing to wait for
		}
		acks := make(chan settle, e.cfg.window)
		acked := make(chan struct{})
		go func() {
			defer close(acked)
			for a := range acks {
				if a.f != nil {
					select {
					case <-a.f.Ok():
					case <-a.f.Err():
						fail()
						continue
					}
				}
				if err := a.msg.Ack(); err != nil {
					fail()
					continue
				}
				count()
			}
		}()
		cc, err := cons.Consume(func(msg jetstream.Msg) {
			k, run, err := parseStep(msg.Subject())
			if err != nil {
				fail()
				return
			}
			var f jetstream.PubAckFuture
			if next := nextStep(k, run); next != nil {
				if f, err = js.PublishMsgAsync(next); err != nil {
					fail()
					return
				}
			}
			acks <- settle{msg, f}
		})
		if err != nil {
			return 0, fmt.Errorf("bench: consume: %w", err)
		}
		stop = func() { cc.Stop(); close(acks); <-acked }
	} else if how == rawConsume {
		cc, err := cons.Consume(handle)
		if err != nil {
			return 0, fmt.Errorf("bench: consume: %w", err)
		}
		stop = cc.Stop
	} else if stop, err = readMessages(cons, e.cfg.concurrency, handle); err != nil {
		return 0, err
	}
	werr := e.waitFor(ctx, finished, fmt.Sprintf("%d raw chain steps", total))
	res := tm.result(total)
	stop()
	if werr != nil {
		return 0, werr
	}
	if k := failed.Load(); k > 0 {
		return 0, fmt.Errorf("bench: %d raw chain steps failed", k)
	}
	return res.rate, nil
}

// parseStep reads the step number and run of a subject
// rawchain.step.<k>.<run>.
func parseStep(subject string) (int, string, error) {
	k, run, ok := strings.Cut(strings.TrimPrefix(subject, rawChainSteps+"."), ".")
	if !ok {
		return 0, "", fmt.Errorf("bench: subject %q", subject)
	}
	ks, err := strconv.Atoi(k)
	if err != nil {
		return 0, "", fmt.Errorf("bench: subject %q: %w", subject, err)
	}
	return ks, run, nil
}

// nextStep returns the message of step k+1 of run, or nil after the last
// step. Its Nats-Msg-Id is "<run>.<k+1>".
func nextStep(k int, run string) *nats.Msg {
	if k >= wfBenchSteps {
		return nil
	}
	nk := strconv.Itoa(k + 1)
	return &nats.Msg{Subject: rawChainSteps + "." + nk + "." + run, Data: []byte("{}"),
		Header: nats.Header{jetstream.MsgIDHeader: []string{run + "." + nk}}}
}
