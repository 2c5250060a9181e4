package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// ---- latency ----

// sample is one enqueue→start measurement: when the task was sent (offset
// from the figure's start) and how long it took to start.
type sample struct {
	sent, lat time.Duration
}

// recorder collects samples from handlers and closes done when want arrive.
type recorder struct {
	mu      sync.Mutex
	samples []sample
	want    int
	done    chan struct{}
}

func newRecorder(capacity int) *recorder {
	return &recorder{samples: make([]sample, 0, capacity), want: -1, done: make(chan struct{})}
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	r.checkLocked()
	r.mu.Unlock()
}

// expect sets the number of samples that closes done.
func (r *recorder) expect(n int) {
	r.mu.Lock()
	r.want = n
	r.checkLocked()
	r.mu.Unlock()
}

func (r *recorder) checkLocked() {
	if r.want >= 0 && len(r.samples) == r.want {
		close(r.done)
		r.want = -1
	}
}

func (r *recorder) latencies(sentFrom time.Duration) []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, 0, len(r.samples))
	for _, s := range r.samples {
		if s.sent >= sentFrom {
			out = append(out, s.lat)
		}
	}
	return out
}

// stampHandler records, for tasks whose payload is the send offset from t0
// in nanoseconds, the time from send to handler start.
func stampHandler(t0 time.Time, rec *recorder) func(context.Context, *framework.Task) error {
	return func(_ context.Context, t *framework.Task) error {
		now := time.Since(t0)
		sent, err := strconv.ParseInt(string(t.Payload), 10, 64)
		if err != nil {
			return framework.Permanent(fmt.Errorf("bench: payload %q: %w", t.Payload, err))
		}
		rec.add(sample{sent: time.Duration(sent), lat: now - time.Duration(sent)})
		return nil
	}
}

// stampedEnqueue enqueues one task whose payload is the send offset from t0.
func stampedEnqueue(ctx context.Context, cl *framework.Client, t0 time.Time, taskType string, opts ...framework.EnqueueOption) error {
	sent := time.Since(t0)
	_, err := cl.Enqueue(ctx, taskType, json.RawMessage(strconv.AppendInt(nil, int64(sent), 10)), opts...)
	return err
}

func (e *env) figureLatency(ctx context.Context, out io.Writer) error {
	var p50s, p99s []float64
	sent := 0
	for r := 1; r <= e.cfg.runs; r++ {
		p50, p99, k, err := e.latencyRun(ctx)
		if err != nil {
			return fmt.Errorf("run %d: %w", r, err)
		}
		e.progress("latency run %d/%d: %d tasks at %d/s, p50 %.2f ms, p99 %.2f ms", r, e.cfg.runs, k, e.cfg.latencyRate, ms(p50), ms(p99))
		p50s, p99s = append(p50s, ms(p50)), append(p99s, ms(p99))
		sent = k
	}
	printResult(out, figLatency, fint("rate_per_s", e.cfg.latencyRate), fms("p50_ms", median(p50s)), fms("p99_ms", median(p99s)),
		fint("samples", sent), fint("runs", e.cfg.runs))
	return nil
}

// latencyRun enqueues tasks at a steady rate, one Enqueue per tick of a
// ticker, and measures enqueue→handler start. Tasks sent during the warm-up
// are run but not measured. It returns p50, p99 and the measured count.
func (e *env) latencyRun(ctx context.Context) (time.Duration, time.Duration, int, error) {
	total := int(int64(e.cfg.latencyRate) * int64(e.cfg.latencyWarmup+e.cfg.latencyDur) / int64(time.Second))
	t0 := time.Now()
	rec := newRecorder(total)
	w, stop, err := e.newWorker(e.tracking())
	if err != nil {
		return 0, 0, 0, err
	}
	w.HandleFunc(typeLatency, stampHandler(t0, rec))
	if err := w.Start(ctx); err != nil {
		_ = stop()
		return 0, 0, 0, err
	}
	nc, err := e.connect()
	if err != nil {
		_ = stop()
		return 0, 0, 0, err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, e.tracking())
	if err != nil {
		_ = stop()
		return 0, 0, 0, err
	}
	firstSend := time.Since(t0)
	failed := e.paced(ctx, time.Second/time.Duration(e.cfg.latencyRate), total, nil, func() error {
		return stampedEnqueue(ctx, cl, t0, typeLatency)
	})
	rec.expect(total - failed)
	werr := e.waitFor(ctx, rec.done, "latency tasks")
	if err := errors.Join(werr, stop()); err != nil {
		return 0, 0, 0, err
	}
	if failed > 0 {
		return 0, 0, 0, fmt.Errorf("bench: %d enqueues failed", failed)
	}
	lats := rec.latencies(firstSend + e.cfg.latencyWarmup)
	return percentile(lats, 50), percentile(lats, 99), len(lats), nil
}

// paced calls send in its own goroutine on every tick of a ticker with the
// given interval, max times or until until is closed, and returns the number
// of failed sends once all have returned.
func (e *env) paced(ctx context.Context, every time.Duration, maxSends int, until <-chan struct{}, send func() error) int {
	var failed atomic.Int64
	var wg sync.WaitGroup
	tick := time.NewTicker(every)
	defer tick.Stop()
loop:
	for i := 0; maxSends < 0 || i < maxSends; i++ {
		select {
		case <-tick.C:
		case <-until:
			break loop
		case <-ctx.Done():
			break loop
		}
		wg.Go(func() {
			if err := send(); err != nil {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	return int(failed.Load())
}
