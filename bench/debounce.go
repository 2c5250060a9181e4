package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/debounce"
	"github.com/jetflow-io/jetflow/framework"
)

// figDebounce names the debounce figure.
const figDebounce = "debounce"

// Settings of the debounce figure: debounceEnqueues enqueues spread over
// debounceKeys keys from 16 producers, each key's enqueues numbered in
// order, with a window shorter than the gap between a key's enqueues is
// long, so that a key's burst lasts as long as the enqueues and only its
// maximum wait ends it, and once more when they stop.
const (
	debounceKeys    = 100
	debounceType    = "bench.debounce"
	debounceWindow  = 200 * time.Millisecond
	debounceMaxWait = time.Second
	// debounceSlack is how late after its maximum wait a run may start and
	// still count as on time (max_wait_ok): the delay figure's p99 target,
	// the check being a delayed task.
	debounceSlack = 300 * time.Millisecond
)

// runDebounce measures the debounce figure: -n enqueues (at most 10,000,
// at least 1,000) over debounceKeys keys, then the runs each key made. A
// run's payload is the number of the last enqueue it covers, so the
// enqueues a run covers are those after the run before; its burst began
// with the first of them. It prints how many runs there were, how many
// started within the maximum wait of their burst's first enqueue (plus
// debounceSlack), the p99 of how late after it they started, and whether
// every key's last enqueue ran (last_ok).
func (e *env) runDebounce(ctx context.Context, out io.Writer) error {
	n := min(max(e.cfg.n/5, 1000), 10000)
	type run struct {
		at   time.Time
		last int
	}
	var mu sync.Mutex
	ran := make(map[string][]run, debounceKeys)
	w, stop, err := e.newWorker()
	if err != nil {
		return err
	}
	defer func() { _ = stop() }()
	if err := debounce.Install(w); err != nil {
		return err
	}
	framework.Handle(w, debounceType, func(_ context.Context, t *framework.Task, last int) error {
		mu.Lock()
		ran[t.Key()] = append(ran[t.Key()], run{at: time.Now(), last: last})
		mu.Unlock()
		return nil
	})
	if err := w.Start(ctx); err != nil {
		return err
	}
	nc, err := e.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, framework.WithStateTracking(false))
	if err != nil {
		return err
	}
	// Key k's enqueue i (i from 1) at sent[k][i-1]; producers take keys
	// in turn so that each key's enqueues stay in order.
	sent := make([][]time.Time, debounceKeys)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	start := time.Now()
	// One producer per group of keys, so a key's enqueues are sequential.
	per := n / debounceKeys
	for g := range 16 {
		wg.Go(func() {
			for i := 1; i <= per; i++ {
				for k := g; k < debounceKeys; k += 16 {
					at := time.Now()
					o := debounce.Options{Key: fmt.Sprintf("key-%d", k), Window: debounceWindow, MaxWait: debounceMaxWait}
					if _, err := debounce.Enqueue(ctx, cl, debounceType, i, o); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					sent[k] = append(sent[k], at)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return fmt.Errorf("bench: debounce enqueue: %w", err)
	}
	enqueued := time.Since(start)
	e.progress("debounce: %d enqueues over %d keys in %v", per*debounceKeys, debounceKeys, enqueued.Round(time.Millisecond))
	deadline := time.Now().Add(e.cfg.timeout)
	for {
		mu.Lock()
		done := 0
		for k := range debounceKeys {
			if rs := ran[fmt.Sprintf("key-%d", k)]; len(rs) > 0 && rs[len(rs)-1].last == per {
				done++
			}
		}
		mu.Unlock()
		if done == debounceKeys {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: debounce: %d of %d keys ran their last enqueue within %v", done, debounceKeys, e.cfg.timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond): // polling the handler's record, not synchronising
		}
	}
	mu.Lock()
	defer mu.Unlock()
	runs, onTime, lastOK := 0, 0, 1
	var late []float64
	for k := range debounceKeys {
		rs := ran[fmt.Sprintf("key-%d", k)]
		slices.SortFunc(rs, func(a, b run) int { return a.at.Compare(b.at) })
		prev := 0
		for _, r := range rs {
			runs++
			if r.last <= prev || r.last > per {
				continue // a second run of a payload already covered
			}
			first := sent[k][prev] // the burst's first enqueue: the one after the run before
			l := r.at.Sub(first) - debounceMaxWait
			late = append(late, float64(max(l, 0))/float64(time.Millisecond))
			if l <= debounceSlack {
				onTime++
			}
			prev = r.last
		}
		if prev != per {
			lastOK = 0
		}
	}
	slices.Sort(late)
	p99 := 0.0
	if len(late) > 0 {
		p99 = late[min(len(late)-1, len(late)*99/100)]
	}
	printResult(out, figDebounce, fint("enqueues", per*debounceKeys), fint("keys", debounceKeys),
		fint("window_ms", int(debounceWindow/time.Millisecond)), fint("max_wait_ms", int(debounceMaxWait/time.Millisecond)),
		fint("runs", runs), fint("max_wait_ok", onTime), fint("bursts", len(late)), fratio("late_p99_ms", p99),
		fint("last_ok", lastOK), fratio("enqueue_s", enqueued.Seconds()))
	return nil
}
