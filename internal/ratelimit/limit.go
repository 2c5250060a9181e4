package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
)

// MaxThrottle bounds the pause a Throttle applies.
const MaxThrottle = time.Hour

// Limit is at most Limit permits per Interval, plus Burst at once after an
// idle period.
type Limit struct {
	Limit    int
	Interval time.Duration
	Burst    int
}

// Normalize fills the defaults (Interval 1 s, Burst 1) and validates l. The
// error names the invalid field; callers wrap it with their own sentinel.
func (l Limit) Normalize() (Limit, error) {
	if l.Interval == 0 {
		l.Interval = time.Second
	}
	if l.Burst == 0 {
		l.Burst = 1
	}
	switch {
	case l.Limit < 1:
		return l, fmt.Errorf("rate limit %d per %v, want ≥ 1", l.Limit, l.Interval)
	case l.Interval < time.Millisecond || l.Interval > 24*time.Hour:
		return l, fmt.Errorf("rate limit interval %v, want 1 ms to 24 h", l.Interval)
	case l.Burst < 1 || l.Burst > l.Limit:
		return l, fmt.Errorf("rate limit burst %d, want 1 to the limit %d", l.Burst, l.Limit)
	case l.Interval/time.Duration(l.Limit) < time.Microsecond:
		return l, fmt.Errorf("rate limit %d per %v is above 1,000,000 per second", l.Limit, l.Interval)
	}
	return l, nil
}

// Emission is the spacing of permits.
func (l Limit) Emission() time.Duration { return l.Interval / time.Duration(l.Limit) }

// Tolerance is how far ahead of the emission spacing a burst may go.
func (l Limit) Tolerance() time.Duration { return time.Duration(l.Burst-1) * l.Emission() }

// Horizon is how far ahead of now a process reserves permits: a few
// emission intervals, at least 50 ms, at most 1 s.
func (l Limit) Horizon() time.Duration {
	return min(max(4*l.Emission(), 50*time.Millisecond), time.Second)
}

// Record is the value of a limit's key in the limits bucket.
type Record struct {
	// TAT is the theoretical arrival time of the next permit (GCRA), in Unix
	// nanoseconds of the writer's clock.
	TAT int64 `json:"tat"`
	// The limit, as configured by the last writer.
	Limit      int   `json:"limit"`
	IntervalNS int64 `json:"interval_ns"`
	Burst      int   `json:"burst"`
	// ThrottledUntil is the end of the last pause asked by Throttle, in
	// Unix nanoseconds.
	ThrottledUntil int64 `json:"throttled_until,omitempty"`
	// Window is a Unix second; Count the permits reserved during it; Prev
	// those reserved during the second before.
	Window int64 `json:"window"`
	Count  int   `json:"count"`
	Prev   int   `json:"prev"`
}

// countAt adds n permits reserved at now to the per-second counters.
func (r *Record) countAt(now time.Time, n int) {
	sec := now.Unix()
	switch {
	case sec == r.Window:
	case sec == r.Window+1:
		r.Prev, r.Count, r.Window = r.Count, 0, sec
	default:
		r.Prev, r.Count, r.Window = 0, 0, sec
	}
	r.Count += n
}

// Sane reports whether a record read from the bucket can be used: a TAT no
// further ahead than a maximal throttle allows.
func (r *Record) Sane(now time.Time, l Limit) bool {
	limit := now.Add(MaxThrottle + l.Tolerance() + l.Horizon() + time.Minute).UnixNano()
	return r.TAT <= limit && r.ThrottledUntil <= limit && r.Count >= 0 && r.Prev >= 0
}

// KeyType returns the bucket key of a task type's limit.
func KeyType(taskType string) string { return "type." + taskType }

// KeyDep returns the bucket key of a dependency's limit.
func KeyDep(dep string) string { return "dep." + dep }

// EnsureBucket creates the limits bucket (stored like the task stream) if
// needed and returns it.
func EnsureBucket(ctx context.Context, js jetstream.JetStream, bucket, taskStream string) (jetstream.KeyValue, error) {
	cfg := jsapi.TaskStreamBucket(ctx, js, taskStream, jetstream.KeyValueConfig{
		Bucket:      bucket,
		Description: "jetflow rate limits: one GCRA token bucket per task type or dependency",
		History:     1,
	})
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, cfg.Bucket)
}

// Info is the state of one limit as read from the bucket.
type Info struct {
	Key            string
	Limit          Limit
	LastSecond     int
	Next           time.Time
	ThrottledUntil time.Time
}

// List reads every limit of the bucket whose key passes validKey and whose
// record is valid; others are skipped. A missing bucket lists nothing.
func List(ctx context.Context, js jetstream.JetStream, bucket string, validKey func(string) bool) ([]Info, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	now := time.Now()
	var out []Info
	for _, k := range keys {
		if !validKey(k) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var r Record
		if json.Unmarshal(e.Value(), &r) != nil {
			continue
		}
		l, err := Limit{Limit: r.Limit, Interval: time.Duration(r.IntervalNS), Burst: r.Burst}.Normalize()
		if err != nil || !r.Sane(now, l) {
			continue
		}
		last := 0
		switch now.Unix() {
		case r.Window + 1:
			last = r.Count
		case r.Window:
			last = r.Prev
		}
		info := Info{Key: k, Limit: l, LastSecond: last, Next: time.Unix(0, r.TAT).Add(-l.Tolerance())}
		if r.ThrottledUntil > 0 {
			info.ThrottledUntil = time.Unix(0, r.ThrottledUntil)
		}
		out = append(out, info)
	}
	return out, nil
}
