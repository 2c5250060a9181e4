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
// jetflow side is measured three ways: on a deployment of -type-partitions
// partitions spread by type (decision 047), where the drain's stream holds
// the consumers of its share of the types (ratio, the figure's target);
// on the default deployment of one task stream (one_stream_ratio); and
// serving one priority per type (framework.WithServedPriorities), which
// leaves one consumer per type, as raw has (one_priority_ratio). The
// deployment spread by type also drains the drain's type alone, with no
// other type's consumers (types_over_one: the drain with the other types
// over the drain without them).
func (e *env) figureDrainTypes(ctx context.Context, out io.Writer) error {
	k := e.cfg.types
	var rawRates, jfRates, oneRates, ratios, oneRatios, rawCPU, jfCPU, oneCPU []float64
	var btRates, btRatios, btCPU, oneTypeRates, overOne []float64
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
				figDrainTypes, r, e.cfg.runs, (k+1)*len(streams.Priorities), jr.rate, usOf(jr.cpu))
			or, err = withIdle(normal, func(ctx context.Context) (runResult, error) { return e.drainJetflowRunAt(ctx, normal) })
			if err != nil {
				return fmt.Errorf("jetflow one-priority run %d: %w", r, err)
			}
			e.progress("%s run %d/%d jetflow, one priority per type, %d consumers: %8.0f tasks/s, %5.1f µs CPU/task",
				figDrainTypes, r, e.cfg.runs, k+1, or.rate, usOf(or.cpu))
			br, err := e.drainByType(ctx, k, e.cfg.typeParts) // types_bytype.go
			if err != nil {
				return fmt.Errorf("jetflow by-type run %d: %w", r, err)
			}
			e.progress("%s run %d/%d jetflow, %d partitions by type: %8.0f tasks/s, %5.1f µs CPU/task",
				figDrainTypes, r, e.cfg.runs, e.cfg.typeParts, br.rate, usOf(br.cpu))
			ot, err := e.drainByType(ctx, 0, e.cfg.typeParts)
			if err != nil {
				return fmt.Errorf("jetflow by-type run %d, one type: %w", r, err)
			}
			e.progress("%s run %d/%d jetflow, %d partitions by type, the drain's type alone: %8.0f tasks/s (%.3f of it with the other types)",
				figDrainTypes, r, e.cfg.runs, e.cfg.typeParts, ot.rate, br.rate/ot.rate)
			oneTypeRates, overOne = append(oneTypeRates, ot.rate), append(overOne, br.rate/ot.rate)
			btRates, btCPU = append(btRates, br.rate), append(btCPU, usOf(br.cpu))
			if rr.rate > 0 {
				btRatios = append(btRatios, br.rate/rr.rate)
			}
			jfRates, jfCPU = append(jfRates, jr.rate), append(jfCPU, usOf(jr.cpu))
			oneRates, oneCPU = append(oneRates, or.rate), append(oneCPU, usOf(or.cpu))
		}
		if rr.rate > 0 && jr.rate > 0 {
			ratios, oneRatios = append(ratios, jr.rate/rr.rate), append(oneRatios, or.rate/rr.rate)
			e.progress("%s run %d/%d ratio %.3f, one priority %.3f", figDrainTypes, r, e.cfg.runs, jr.rate/rr.rate, or.rate/rr.rate)
		}
	}
	printResult(out, figDrainTypes, fint("types", k+1),
		fint("raw_consumers", k+1), fint("jetflow_consumers", byTypeConsumers(k, e.cfg.typeParts)),
		fint("one_stream_consumers", (k+1)*len(streams.Priorities)),
		fint("type_partitions", e.cfg.typeParts),
		frate("raw_per_s", median(rawRates)), frate("jetflow_per_s", median(btRates)), fratio("ratio", median(btRatios)),
		frate("one_type_per_s", median(oneTypeRates)), fratio("types_over_one", median(overOne)),
		frate("one_stream_per_s", median(jfRates)), fratio("one_stream_ratio", median(ratios)),
		frate("one_priority_per_s", median(oneRates)), fratio("one_priority_ratio", median(oneRatios)),
		fcpu("raw_cpu_us", median(rawCPU)), fcpu("jetflow_cpu_us", median(btCPU)), fcpu("one_stream_cpu_us", median(jfCPU)),
		fcpu("one_priority_cpu_us", median(oneCPU)),
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

// byTypeConsumers is how many consumers the stream the drain's tasks go to
// holds on a deployment of parts partitions spread by type, with k idle
// types: four per type that partition serves.
func byTypeConsumers(k, parts int) int {
	l := streams.Layout{Partitions: parts, Ordered: parts, By: streams.PartitionByType}
	home := l.TypePartition(typeDrain)
	n := len(streams.Priorities)
	for i := range k {
		if l.Serves(home, fmt.Sprintf("%s%d", typeIdle, i)) {
			n += len(streams.Priorities)
		}
	}
	return n
}
