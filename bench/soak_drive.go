package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// drive sends tasks at -soak-rate until ctx ends: every 10 ms the tasks due
// by then go out in one EnqueueMany, handed to one of a few senders so that a
// slow acknowledgement does not stall the pace. A sender that falls behind
// blocks the pacer, and the achieved rate drops below the target.
//
// The pace stops when ctx ends; the enqueues under way go on under sendCtx,
// so that no task counted as sent is cut off at the end of the load.
func (s *soakRun) drive(ctx, sendCtx context.Context, cl *framework.Client) {
	const senders = 4
	batches := make(chan [2]uint64, senders)
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			for b := range batches {
				s.send(sendCtx, cl, b[0], b[1])
			}
		})
	}
	defer func() { close(batches); wg.Wait() }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	var next uint64
	maxBatch := uint64(max(s.cfg.soakRate/10, 1))
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due := min(uint64(time.Since(start).Seconds()*float64(s.cfg.soakRate)), s.capacity)
		for next < due {
			end := min(due, next+maxBatch)
			select {
			case batches <- [2]uint64{next, end}:
			case <-ctx.Done():
				return
			}
			next = end
		}
	}
}

// send enqueues tasks [from, to), retrying the failed ones with the same
// IDs (deduplicated by the server) until they are stored or ctx ends.
func (s *soakRun) send(ctx context.Context, cl *framework.Client, from, to uint64) {
	jobs := make([]framework.TaskSpec, 0, to-from)
	idxs := make([]uint64, 0, to-from)
	sent, wall := time.Since(s.t0), time.Now()
	for i := from; i < to; i++ {
		d := drawTask(i, s.cfg.soakMaxDelay)
		p := soakPayload{idx: i, sent: sent}
		typ := soakTypeTask
		opts := []framework.EnqueueOption{framework.WithID(s.runID + "-" + strconv.FormatUint(i, 10)), framework.WithPriority(d.priority)}
		switch d.kind {
		case kindDelayed:
			// At most the task's Scheduled-For: In adds the delay to a
			// later now.
			p.due = wall.Add(d.delay).UnixNano()
			opts = append(opts, framework.In(d.delay))
		case kindDep:
			typ = soakTypeDep
		}
		jobs = append(jobs, framework.TaskSpec{Type: typ, Payload: p.encode(), Options: opts})
		idxs = append(idxs, i)
	}
	s.sent.Add(to - from)
	for attempt := 0; len(jobs) > 0; attempt++ {
		_, err := cl.EnqueueMany(ctx, jobs)
		var be *framework.BatchError
		switch {
		case err == nil:
			for _, i := range idxs {
				s.confirmed.set(i)
			}
			return
		case errors.As(err, &be):
			var retryJobs []framework.TaskSpec
			var retryIdxs []uint64
			for k, i := range idxs {
				if _, failed := be.Errors[k]; failed {
					retryJobs, retryIdxs = append(retryJobs, jobs[k]), append(retryIdxs, i)
				} else {
					s.confirmed.set(i)
				}
			}
			s.enqErrs.Add(uint64(len(retryJobs)))
			if attempt == 0 {
				s.progress("enqueue: %d of %d tasks failed, retrying: %v", len(retryJobs), len(jobs), err)
			}
			jobs, idxs = retryJobs, retryIdxs
		default:
			s.enqErrs.Add(uint64(len(jobs)))
			if attempt == 0 {
				s.progress("enqueue of %d tasks failed, retrying: %v", len(jobs), err)
			}
		}
		select {
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			// Interrupted: the tasks left are not confirmed, and the
			// final check leaves them out.
			return
		}
	}
}

// outage takes the dependency down from from to to (offsets from the start
// of the load).
func (s *soakRun) outage(ctx context.Context, from, to time.Duration) {
	wait := func(until time.Duration) bool {
		t := time.NewTimer(time.Until(s.t0.Add(until)))
		defer t.Stop()
		select {
		case <-t.C:
			return true
		case <-ctx.Done():
			return false
		}
	}
	if !wait(from) {
		return
	}
	s.depDown.Store(true)
	s.progress("dependency down")
	defer func() {
		s.depDown.Store(false)
		s.progress("dependency up")
	}()
	wait(to)
}

// sample takes one row of the time series and resets the interval's
// latencies.
func (s *soakRun) sample(ctx context.Context, loading bool) soakSample {
	smp := soakSample{at: time.Since(s.t0), load: loading, outage: s.depDown.Load()}
	s.mu.Lock()
	smp.lat = s.cur
	s.cur = soakLatencies{}
	s.mu.Unlock()
	smp.sent = s.sent.Load()
	if dt := smp.at - s.lastAt; dt > 0 {
		smp.rate = float64(smp.sent-s.lastSent) / dt.Seconds()
	}
	s.lastAt, s.lastSent = smp.at, smp.sent
	smp.succeeded = s.succeeded.Load()
	smp.poisonRan = s.poisonRan.Load()
	smp.outstanding = int64(smp.sent) - int64(smp.succeeded) - int64(smp.poisonRan)
	for _, typ := range []string{soakTypeTask, soakTypeDep} {
		for _, p := range soakPriorities {
			cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := s.e.js.Consumer(cctx, s.names.TaskStream(), s.names.ConsumerName(typ, p))
			cancel()
			if err != nil {
				smp.backlog = -1
				continue
			}
			if smp.backlog >= 0 {
				ci := c.CachedInfo()
				smp.backlog += int64(ci.NumPending) + int64(ci.NumAckPending)
			}
		}
	}
	smp.rssMB = float64(rss()) / (1 << 20)
	smp.serversMB = float64(rssOf(s.e.servers)) / (1 << 20)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	smp.heapMB = float64(ms.HeapInuse) / (1 << 20)
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	if live[0].Value.Kind() == metrics.KindUint64 {
		smp.liveMB = float64(live[0].Value.Uint64()) / (1 << 20)
	}
	smp.goroutines = runtime.NumGoroutine()
	return smp
}

// soakHeader names the CSV columns; latencies are in milliseconds and empty
// when the interval had no sample.
var soakHeader = []string{"elapsed_s", "load", "outage", "sent", "sent_per_s", "succeeded", "dead", "outstanding", "backlog",
	"critical_p50_ms", "critical_p99_ms", "high_p50_ms", "high_p99_ms", "normal_p50_ms", "normal_p99_ms",
	"low_p50_ms", "low_p99_ms", "all_p50_ms", "all_p99_ms", "delay_p99_ms", "dep_p99_ms", "rss_mb", "heap_mb", "live_mb", "goroutines", "servers_rss_mb"}

func (smp *soakSample) row() []string {
	b := func(v bool) string {
		if v {
			return "1"
		}
		return "0"
	}
	q := func(h *histogram, p float64) string {
		d, ok := h.quantile(p)
		if !ok {
			return ""
		}
		return strconv.FormatFloat(ms(d), 'f', 3, 64)
	}
	r := []string{strconv.FormatFloat(smp.at.Seconds(), 'f', 1, 64), b(smp.load), b(smp.outage),
		strconv.FormatUint(smp.sent, 10), strconv.FormatFloat(smp.rate, 'f', 0, 64), strconv.FormatUint(smp.succeeded, 10),
		strconv.FormatUint(smp.poisonRan, 10), strconv.FormatInt(smp.outstanding, 10), strconv.FormatInt(smp.backlog, 10)}
	for i := range smp.lat.start {
		r = append(r, q(&smp.lat.start[i], 50), q(&smp.lat.start[i], 99))
	}
	r = append(r, q(&smp.lat.all, 50), q(&smp.lat.all, 99), q(&smp.lat.delay, 99), q(&smp.lat.dep, 99),
		strconv.FormatFloat(smp.rssMB, 'f', 1, 64), strconv.FormatFloat(smp.heapMB, 'f', 1, 64),
		strconv.FormatFloat(smp.liveMB, 'f', 1, 64), strconv.Itoa(smp.goroutines),
		strconv.FormatFloat(smp.serversMB, 'f', 1, 64))
	return r
}

func (smp *soakSample) summary() string {
	p99, _ := smp.lat.all.quantile(99)
	c99, _ := smp.lat.start[0].quantile(99)
	phase := "load"
	if !smp.load {
		phase = "drain"
	}
	return fmt.Sprintf("%6.0fs %-5s sent %d, outstanding %d, backlog %d, dead %d; p99 %.2f ms (critical %.2f ms); rss %.0f MB, heap %.0f MB (live %.0f MB), %d goroutines",
		smp.at.Seconds(), phase, smp.sent, smp.outstanding, smp.backlog, smp.poisonRan, ms(p99), ms(c99), smp.rssMB, smp.heapMB, smp.liveMB, smp.goroutines)
}
