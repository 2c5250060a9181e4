package fairness

import (
	"math"
	"time"
)

// DepthCap bounds the depth that [Options.Wait] adapts to, unless
// [Options.Depth] is larger.
const DepthCap = 4096

// rateAlpha is the weight of the newest sample in the smoothed completion
// rate; rateWindow is the shortest span a sample covers (shorter looks
// keep counting into the next sample).
const (
	rateAlpha  = 0.25
	rateWindow = 20 * time.Millisecond
)

// targetDepth returns how many tasks of a type the mover keeps waiting in
// the task stream: what this worker finishes in wait at rate tasks per
// second, at least minDepth and at most DepthCap (or minDepth when it is
// larger). A wait of zero or less turns the adaptation off: minDepth.
func targetDepth(minDepth int, rate float64, wait time.Duration) int {
	if wait <= 0 || !(rate > 0) {
		return minDepth
	}
	hi := max(minDepth, DepthCap)
	d := rate * wait.Seconds()
	if d >= float64(hi) || math.IsInf(d, 1) {
		return hi
	}
	return max(minDepth, int(math.Ceil(d)))
}

// rateMeter smooths the completion rate of a type on a worker: an
// exponentially weighted moving average of the tasks finished per second,
// one sample per look at least rateWindow apart. It is not safe for
// concurrent use.
type rateMeter struct {
	at   time.Time // start of the current sample (zero: none yet)
	done int64     // finished count at the start of the current sample
	rate float64   // tasks per second
}

// observe notes that done tasks (a running count) had finished by now and
// returns the smoothed rate.
func (r *rateMeter) observe(now time.Time, done int64) float64 {
	if r.at.IsZero() {
		r.at, r.done = now, done
		return r.rate
	}
	span := now.Sub(r.at)
	if span < rateWindow {
		return r.rate
	}
	sample := float64(done-r.done) / span.Seconds()
	// Spans longer than a window weigh as several windows, so that an
	// idle spell between rare looks decays the rate as it would have.
	w := 1 - math.Pow(1-rateAlpha, min(float64(span)/float64(rateWindow), 64))
	r.rate += w * (sample - r.rate)
	r.at, r.done = now, done
	return r.rate
}
