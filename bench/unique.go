package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// Task types of the unique figure.
const (
	typeUniquePlain = "bench.uniqueplain"
	typeUnique      = "bench.unique"
)

// runUnique measures the cost of framework.Unique per enqueue: n sequential
// Enqueue calls without it, n with it (each a new payload, so each reserves
// a key), and n repeats of those payloads (each refused as a duplicate).
// Sequential calls show the added round trip; the medians of -runs rounds
// are printed, in microseconds per enqueue:
//
//	RESULT unique plain_us=… unique_us=… cost_us=… duplicate_us=… n=… runs=…
func (e *env) runUnique(ctx context.Context, out io.Writer) error {
	n := min(e.cfg.n, 5000)
	nc, err := e.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc)
	if err != nil {
		return err
	}
	timed := func(f func(i int) error) (float64, error) {
		start := time.Now()
		for i := range n {
			if err := f(i); err != nil {
				return 0, err
			}
		}
		return float64(time.Since(start).Microseconds()) / float64(n), nil
	}
	var plain, uniq, dup []float64
	for r := 1; r <= e.cfg.runs; r++ {
		p, err := timed(func(i int) error {
			_, err := cl.Enqueue(ctx, typeUniquePlain, map[string]int{"run": r, "i": i})
			return err
		})
		if err != nil {
			return err
		}
		u, err := timed(func(i int) error {
			info, err := cl.Enqueue(ctx, typeUnique, map[string]int{"run": r, "i": i}, framework.Unique(time.Hour))
			if err == nil && info.Duplicate {
				err = fmt.Errorf("bench: unique enqueue %d of run %d refused as duplicate", i, r)
			}
			return err
		})
		if err != nil {
			return err
		}
		d, err := timed(func(i int) error {
			info, err := cl.Enqueue(ctx, typeUnique, map[string]int{"run": r, "i": i}, framework.Unique(time.Hour))
			if err == nil && !info.Duplicate {
				err = fmt.Errorf("bench: repeated unique enqueue %d of run %d was stored", i, r)
			}
			return err
		})
		if err != nil {
			return err
		}
		for _, tt := range []string{typeUniquePlain, typeUnique} {
			if err := e.checkStored(ctx, e.names.TaskSubject(streams.PriorityNormal, tt), n); err != nil {
				return err
			}
		}
		e.progress("unique run %d/%d: plain %.0f µs, unique %.0f µs, duplicate %.0f µs per enqueue", r, e.cfg.runs, p, u, d)
		plain, uniq, dup = append(plain, p), append(uniq, u), append(dup, d)
	}
	mp, mu := median(plain), median(uniq)
	printResult(out, figUnique, fcpu("plain_us", mp), fcpu("unique_us", mu), fcpu("cost_us", mu-mp),
		fcpu("duplicate_us", median(dup)), fint("n", n), fint("runs", e.cfg.runs))
	return nil
}
