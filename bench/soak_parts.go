package main

import (
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/framework"
)

// soakSeed fixes the mix of kinds, priorities and delays: every run sends
// the same sequence.
const soakSeed = 0x6a6574666c6f77

// splitmix64 is a bijective 64-bit mixer (SplitMix64's finaliser): the
// per-task random draws are a hash of the index.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// soakDraw is what the index of a task decides about it.
type soakDraw struct {
	kind     soakKind
	priority framework.Priority
	delay    time.Duration // kindDelayed only
}

func drawTask(idx uint64, maxDelay time.Duration) soakDraw {
	h := splitmix64(soakSeed ^ idx)
	d := soakDraw{priority: soakPriorities[(h>>20)%4]}
	switch u := h % 10000; {
	case u < sharePoison:
		d.kind = kindPoison
	case u < sharePoison+shareFailOnce:
		d.kind = kindFailOnce
	case u < sharePoison+shareFailOnce+shareDep:
		d.kind = kindDep
	case u < sharePoison+shareFailOnce+shareDep+shareDelayed:
		d.kind = kindDelayed
		// 1 s to maxDelay, in whole milliseconds.
		span := max(uint64((maxDelay-time.Second)/time.Millisecond), 1)
		d.delay = time.Second + time.Duration((h>>32)%span)*time.Millisecond
	}
	return d
}

// bitset is a fixed-size set of task indexes, safe for concurrent use.
type bitset []atomic.Uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

// set adds i and reports whether it was already there.
func (b bitset) set(i uint64) (was bool) {
	m := uint64(1) << (i % 64)
	return b[i/64].Or(m)&m != 0
}

func (b bitset) has(i uint64) bool { return b[i/64].Load()&(1<<(i%64)) != 0 }

// histogram counts durations in logarithmic buckets 2 % wide from 1 µs to
// about 20 minutes: constant memory whatever the number of samples, with
// percentiles exact to 2 %.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histBuckets = 1060
	histGrowth  = 1.02
)

// histBounds[i] is the upper bound of bucket i.
var histBounds = func() [histBuckets]time.Duration {
	var b [histBuckets]time.Duration
	v := float64(time.Microsecond)
	for i := range b {
		b[i] = time.Duration(v)
		v *= histGrowth
	}
	return b
}()

func (h *histogram) add(d time.Duration) {
	// Binary search for the first bound ≥ d.
	lo, hi := 0, histBuckets-1
	for lo < hi {
		mid := (lo + hi) / 2
		if histBounds[mid] >= d {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	h.counts[lo]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the nearest-rank p-th percentile (0 < p ≤ 100), as the
// upper bound of its bucket, or 0 and false without samples.
func (h *histogram) quantile(p float64) (time.Duration, bool) {
	if h.n == 0 {
		return 0, false
	}
	rank := uint64(p/100*float64(h.n) + 0.999999)
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return histBounds[i], true
		}
	}
	return histBounds[histBuckets-1], true
}

// soakLatencies are the latency histograms of one interval, or of the whole
// measured run.
type soakLatencies struct {
	start [4]histogram // enqueue → first handler start of immediate tasks, per priority
	all   histogram    // the same, every priority
	delay histogram    // due time → first handler start of delayed tasks
	dep   histogram    // enqueue → success of dependency tasks (includes the outage's holds)
}

func (l *soakLatencies) merge(o *soakLatencies) {
	for i := range l.start {
		l.start[i].merge(&o.start[i])
	}
	l.all.merge(&o.all)
	l.delay.merge(&o.delay)
	l.dep.merge(&o.dep)
}
