package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jetflow-io/jetflow/streams"
)

// ---- drain_types ----

// typeIdle names the other task types of the drain_types figure.
const typeIdle = "bench.idle"

// figureDrainTypes is the drain figure on a task stream that also holds the
// consumers of cfg.types other task types, as a worker fleet serving them
// creates: jetflow's four per type (one per priority), raw's one per type
// (its own filtered consumer, what a raw user running one work queue per
// type on one stream has). None of them pulls during the drain.
//
// On every acknowledgement the server removes the message only after it
// checked every consumer of the work-queue stream for interest in it
// (stream.ackMsg → checkForInterest), and a consumer whose filter does not
// match tokenizes the subject. The cost of an ack thus grows with the
// consumers of the stream, and jetflow's four per type multiply it. The
// third measurement serves one priority per type
// (framework.WithServedPriorities), which leaves one consumer per type, as
// raw has.
func (e *env) figureDrainTypes(ctx context.Context, out io.Writer) error {
	k := e.cfg.types
	var rawRates, jfRates, oneRates, ratios, oneRatios, rawCPU, jfCPU, oneCPU []float64
	all, normal := streams.Priorities[:], []streams.Priority{streams.PriorityNormal}
	// withIdle runs side on a new task stream that holds the idle types'
	// consumers at prios.
	withIdle := func(prios []streams.Priority, side func(context.Context) (runResult, error)) (runResult, error) {
		return e.fresh(func(ctx context.Context) (runResult, error) {
			if err := e.ensureIdleTypes(ctx, k, prios); err != nil {
				return runResult{}, err
			}
			return side(ctx)
		})(ctx)
	}
	for r := 1; r <= e.cfg.runs; r++ {
		var rr, jr, or runResult
		var err error
		if e.cfg.side != sideJetflow {
			rr, err = withIdle(normal, func(ctx context.Context) (runResult, error) { return e.drainRawBoth(ctx, e.cfg.rawHeader) })
			if err != nil {
				return fmt.Errorf("raw run %d: %w", r, err)
			}
			e.progress("%s run %d/%d raw, %d consumers:      %8.0f tasks/s, %5.1f µs CPU/task (consume %.0f, messages %.0f)",
				figDrainTypes, r, e.cfg.runs, k+1, rr.rate, usOf(rr.cpu), rr.variants[rawConsume], rr.variants[rawMessages])
			rawRates, rawCPU = append(rawRates, rr.rate), append(rawCPU, usOf(rr.cpu))
		}
		if e.cfg.side != sideRaw {
			jr, err = withIdle(all, func(ctx context.Context) (runResult, error) { return e.drainJetflowRunAt(ctx, all) })
			if err != nil {
				return fmt.Errorf("jetflow run %d: %w", r, err)
			}
			e.progress("%s run %d/%d jetflow, %d consumers:  %8.0f tasks/s, %5.1f µs CPU/task",
				figDrainTypes, r, e.cfg.runs, (k+1)*streams.NumPriorities, jr.rate, usOf(jr.cpu))
			or, err = withIdle(normal, func(ctx context.Context) (runResult, error) { return e.drainJetflowRunAt(ctx, normal) })
			if err != nil {
				return fmt.Errorf("jetflow one-priority run %d: %w", r, err)
			}
			e.progress("%s run %d/%d jetflow, one priority per type, %d consumers: %8.0f tasks/s, %5.1f µs CPU/task",
				figDrainTypes, r, e.cfg.runs, k+1, or.rate, usOf(or.cpu))
			jfRates, jfCPU = append(jfRates, jr.rate), append(jfCPU, usOf(jr.cpu))
			oneRates, oneCPU = append(oneRates, or.rate), append(oneCPU, usOf(or.cpu))
		}
		if rr.rate > 0 && jr.rate > 0 {
			ratios, oneRatios = append(ratios, jr.rate/rr.rate), append(oneRatios, or.rate/rr.rate)
			e.progress("%s run %d/%d ratio %.3f, one priority %.3f", figDrainTypes, r, e.cfg.runs, jr.rate/rr.rate, or.rate/rr.rate)
		}
	}
	printResult(out, figDrainTypes, fint("types", k+1),
		fint("raw_consumers", k+1), fint("jetflow_consumers", (k+1)*streams.NumPriorities),
		frate("raw_per_s", median(rawRates)), frate("jetflow_per_s", median(jfRates)), fratio("ratio", median(ratios)),
		frate("one_priority_per_s", median(oneRates)), fratio("one_priority_ratio", median(oneRatios)),
		fcpu("raw_cpu_us", median(rawCPU)), fcpu("jetflow_cpu_us", median(jfCPU)), fcpu("one_priority_cpu_us", median(oneCPU)),
		fint("n", e.cfg.n), fint("runs", e.cfg.runs))
	return nil
}

// ensureIdleTypes creates the consumers of k task types that no one serves
// during the figure, one per priority of prios.
func (e *env) ensureIdleTypes(ctx context.Context, k int, prios []streams.Priority) error {
	for i := range k {
		if err := e.ensureWorkerConsumers(ctx, fmt.Sprintf("%s%d", typeIdle, i), prios...); err != nil {
			return err
		}
	}
	return nil
}
