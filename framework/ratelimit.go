package framework

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/streams"
)

// Cluster-wide rate limits: a GCRA token bucket per limit, kept in one KV
// entry and updated with compare-and-set. Each process reserves permits for
// its local waiters in batches, at most a short horizon ahead, and hands
// them out at their due times. See docs/ratelimits.md.

// RateLimit is a cluster-wide limit: at most Limit permits per Interval for
// every worker of the cluster together, plus Burst permits at once after an
// idle period. Every worker must declare the same values.
type RateLimit struct {
	// Limit is the number of permits per Interval. Required, ≥ 1.
	Limit int
	// Interval is the period Limit applies to. Default 1 s.
	Interval time.Duration
	// Burst is how many permits may be taken at once after an idle period.
	// Default 1: permits are spaced Interval/Limit apart.
	Burst int
}

// MaxThrottle bounds the pause [Throttle] applies.
const MaxThrottle = time.Hour

func (l RateLimit) withDefaults() (RateLimit, error) {
	if l.Interval == 0 {
		l.Interval = time.Second
	}
	if l.Burst == 0 {
		l.Burst = 1
	}
	switch {
	case l.Limit < 1:
		return l, fmt.Errorf("%w: rate limit %d per %v, want ≥ 1", ErrInvalidOption, l.Limit, l.Interval)
	case l.Interval < time.Millisecond || l.Interval > 24*time.Hour:
		return l, fmt.Errorf("%w: rate limit interval %v, want 1 ms to 24 h", ErrInvalidOption, l.Interval)
	case l.Burst < 1 || l.Burst > l.Limit:
		return l, fmt.Errorf("%w: rate limit burst %d, want 1 to the limit %d", ErrInvalidOption, l.Burst, l.Limit)
	case l.Interval/time.Duration(l.Limit) < time.Microsecond:
		return l, fmt.Errorf("%w: rate limit %d per %v is above 1,000,000 per second", ErrInvalidOption, l.Limit, l.Interval)
	}
	return l, nil
}

// emission is the spacing of permits; tolerance how far ahead of it a
// burst may go.
func (l RateLimit) emission() time.Duration  { return l.Interval / time.Duration(l.Limit) }
func (l RateLimit) tolerance() time.Duration { return time.Duration(l.Burst-1) * l.emission() }

// horizon is how far ahead of now a process reserves permits: a few
// emission intervals, at least 50 ms, at most 1 s.
func (l RateLimit) horizon() time.Duration {
	return min(max(4*l.emission(), 50*time.Millisecond), time.Second)
}

// WithRateLimit limits how often tasks of this type start, across every
// worker of the cluster. A task over the limit waits for its permit without
// spending an attempt: in place for a short wait, otherwise set aside (its
// slot serves other tasks, heartbeats keep it alive) until its permit is
// due, like a task held by an open circuit breaker.
func WithRateLimit(l RateLimit) HandlerOption {
	return func(c *handlerConfig) error {
		l, err := l.withDefaults()
		if err != nil {
			return err
		}
		c.rateLimit = &l
		return nil
	}
}

// WithDependencyRateLimit limits the calls to dependency dep made through
// [Call] (and so [handlers.DoHTTP]) across every worker of the cluster. A
// call over the limit waits inside Call, without spending an attempt, until
// its permit is due or ctx ends. Workers only.
func WithDependencyRateLimit(dep string, l RateLimit) WorkerOption {
	return workerOnly(func(o *options) error {
		if err := ValidateDependency(dep); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		l, err := l.withDefaults()
		if err != nil {
			return fmt.Errorf("dependency %s: %w", dep, err)
		}
		if o.rateLimits == nil {
			o.rateLimits = make(map[string]RateLimit)
		}
		o.rateLimits[dep] = l
		return nil
	})
}

// rateRecord is the value of a limit's key in the limits bucket.
type rateRecord struct {
	// TAT is the theoretical arrival time of the next permit (GCRA), in Unix
	// nanoseconds of the writer's clock.
	TAT int64 `json:"tat"`
	// The limit, as configured by the last writer.
	Limit      int   `json:"limit"`
	IntervalNS int64 `json:"interval_ns"`
	Burst      int   `json:"burst"`
	// ThrottledUntil is the end of the last pause asked by [Throttle], in
	// Unix nanoseconds.
	ThrottledUntil int64 `json:"throttled_until,omitempty"`
	// Window is a Unix second; Count the permits reserved during it; Prev
	// those reserved during the second before.
	Window int64 `json:"window"`
	Count  int   `json:"count"`
	Prev   int   `json:"prev"`
}

// countAt adds n permits reserved at now to the per-second counters.
func (r *rateRecord) countAt(now time.Time, n int) {
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

// sane reports whether a record read from the bucket can be used: a TAT no
// further ahead than a maximal throttle allows.
func (r *rateRecord) sane(now time.Time, l RateLimit) bool {
	limit := now.Add(MaxThrottle + l.tolerance() + l.horizon() + time.Minute).UnixNano()
	return r.TAT <= limit && r.ThrottledUntil <= limit && r.Count >= 0 && r.Prev >= 0
}

// limitKey returns the bucket key of a task type's or a dependency's limit.
func limitKeyType(taskType string) string { return "type." + taskType }
func limitKeyDep(dep string) string       { return "dep." + dep }

// ensureLimitsBucket creates the limits bucket if needed and returns it.
func ensureLimitsBucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	cfg := jsapi.TaskStreamBucket(ctx, js, names.TaskStream(), jetstream.KeyValueConfig{
		Bucket:      names.LimitsBucket(),
		Description: "jetflow rate limits: one GCRA token bucket per task type or dependency",
		History:     1,
	})
	if err := jsapi.EnsureBucket(ctx, js, cfg, false); err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, cfg.Bucket)
}

// permit is one waiter's claim on a limiter.
type permit struct {
	ready chan struct{} // closed once granted
	due   time.Time     // set before ready is closed
}

// limiter hands out the permits of one limit to the waiters of one process.
type limiter struct {
	key  string
	lim  RateLimit
	kv   jetstream.KeyValue
	log  *slog.Logger
	stop <-chan struct{}

	mu      sync.Mutex
	queue   []*permit // not yet granted, oldest first
	running bool      // the reserving goroutine runs
	pauseTo time.Time // local end of a Throttle this process asked for

	// Guarded by updMu: the cached record and its revision.
	updMu   sync.Mutex
	rec     rateRecord
	rev     uint64
	haveRec bool
}

// request queues a permit and makes sure the reserving goroutine runs.
func (l *limiter) request() *permit {
	p := &permit{ready: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, p)
	if !l.running {
		l.running = true
		go l.run()
	}
	l.mu.Unlock()
	return p
}

// cancel removes p if it was not granted yet.
func (l *limiter) cancel(p *permit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range l.queue {
		if q == p {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			return
		}
	}
}

// wait blocks until p is granted and due, or ctx ends.
func (l *limiter) wait(ctx context.Context, p *permit) error {
	select {
	case <-p.ready:
	case <-ctx.Done():
		l.cancel(p)
		return ctx.Err()
	}
	return sleepUntil(ctx, l.due(p))
}

// due returns when p may be used: its reserved time, or later when this
// process asked for a pause since.
func (l *limiter) due(p *permit) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pauseTo.After(p.due) {
		return l.pauseTo
	}
	return p.due
}

func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run reserves permits for the queued waiters until none is left.
func (l *limiter) run() {
	retry := 50 * time.Millisecond
	for {
		l.mu.Lock()
		n := len(l.queue)
		if n == 0 {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		dues, next, err := l.reserve(n)
		if err != nil {
			l.log.Warn("jetflow rate limit: could not reserve permits; retrying", slog.String("limit", l.key),
				slog.Duration("retry_in", retry), slog.Any(LogKeyError, err))
			if !l.sleep(retry + rand.N(retry)) {
				l.abandon()
				return
			}
			retry = min(retry*2, 2*time.Second)
			continue
		}
		retry = 50 * time.Millisecond
		if len(dues) == 0 {
			// Nothing within the horizon: wake when the next permit is.
			if !l.sleep(time.Until(next)) {
				l.abandon()
				return
			}
			continue
		}
		l.mu.Lock()
		k := min(len(dues), len(l.queue)) // waiters may have left meanwhile
		for i := range k {
			p := l.queue[i]
			p.due = dues[i]
			close(p.ready)
		}
		l.queue = append(l.queue[:0], l.queue[k:]...)
		l.mu.Unlock()
	}
}

// abandon ends run when the worker stops; waiters see their contexts end.
func (l *limiter) abandon() {
	l.mu.Lock()
	l.running = false
	l.mu.Unlock()
}

func (l *limiter) sleep(d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-l.stop:
		return false
	}
}

// load reads the limit's record from the bucket.
func (l *limiter) load(ctx context.Context) error {
	e, err := l.kv.Get(ctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		l.rec, l.rev, l.haveRec = rateRecord{}, 0, true
		if e != nil {
			l.rev = e.Revision() // a delete marker: update at its revision
		}
		return nil
	case err != nil:
		return err
	}
	var r rateRecord
	if json.Unmarshal(e.Value(), &r) != nil || !r.sane(time.Now(), l.lim) {
		l.log.Warn("jetflow rate limit: invalid record in the limits bucket; starting afresh", slog.String("limit", l.key))
		r = rateRecord{}
	}
	l.rec, l.rev, l.haveRec = r, e.Revision(), true
	return nil
}

// store writes rec at the cached revision; a conflict reports false.
func (l *limiter) store(ctx context.Context, rec rateRecord) (bool, error) {
	rec.Limit, rec.IntervalNS, rec.Burst = l.lim.Limit, int64(l.lim.Interval), l.lim.Burst
	val, err := json.Marshal(rec)
	if err != nil {
		return false, err
	}
	var rev uint64
	if l.rev == 0 {
		rev, err = l.kv.Create(ctx, l.key, val)
	} else {
		rev, err = l.kv.Update(ctx, l.key, val, l.rev)
	}
	if errors.Is(err, jetstream.ErrKeyExists) || natserr.WrongLastSequence(err) {
		l.haveRec = false
		return false, nil
	}
	if err != nil {
		return false, err
	}
	l.rec, l.rev = rec, rev
	return true, nil
}

// update applies f to the current record with compare-and-set, reloading
// and retrying on conflicts.
func (l *limiter) update(f func(now time.Time, rec *rateRecord) bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for attempt := 0; ; attempt++ {
		if !l.haveRec {
			if err := l.load(ctx); err != nil {
				return err
			}
		}
		rec := l.rec
		if !f(time.Now(), &rec) {
			return nil
		}
		ok, err := l.store(ctx, rec)
		if err != nil || ok {
			return err
		}
		if attempt >= 50 {
			return errors.New("framework: rate limit: too many concurrent updates")
		}
	}
}

// reserve takes up to n permits due within the horizon. With none
// available it returns when the next one enters the horizon.
func (l *limiter) reserve(n int) (dues []time.Time, next time.Time, err error) {
	T, tau, h := l.lim.emission(), l.lim.tolerance(), l.lim.horizon()
	l.updMu.Lock()
	defer l.updMu.Unlock()
	err = l.update(func(now time.Time, rec *rateRecord) bool {
		dues = dues[:0]
		tat := time.Unix(0, rec.TAT)
		if tat.Before(now) {
			tat = now
		}
		for k := 0; k < n; k++ {
			at := tat.Add(time.Duration(k)*T - tau)
			if at.After(now.Add(h)) {
				break
			}
			if at.Before(now) {
				at = now
			}
			dues = append(dues, at)
		}
		if len(dues) == 0 {
			next = tat.Add(-tau - h)
			return false
		}
		rec.TAT = tat.Add(time.Duration(len(dues)) * T).UnixNano()
		rec.countAt(now, len(dues))
		return true
	})
	if err != nil {
		return nil, time.Time{}, err
	}
	return dues, next, nil
}

// throttle pushes the next permit of every process to at least now+d.
func (l *limiter) throttle(d time.Duration) error {
	until := time.Now().Add(d)
	l.mu.Lock()
	if until.After(l.pauseTo) {
		l.pauseTo = until
	}
	l.mu.Unlock()
	tau := l.lim.tolerance()
	// Serialised with run's reservations on the cached record.
	l.updMu.Lock()
	defer l.updMu.Unlock()
	return l.update(func(_ time.Time, rec *rateRecord) bool {
		tat := until.Add(tau).UnixNano()
		if rec.TAT >= tat {
			return false
		}
		rec.TAT = tat
		rec.ThrottledUntil = max(rec.ThrottledUntil, until.UnixNano())
		return true
	})
}

// ---- worker wiring ----

// rateLimits holds a worker's limiters.
type rateLimits struct {
	w     *Worker
	kv    jetstream.KeyValue
	byKey map[string]*limiter // fixed after prepare
	held  sync.Map            // *Task → *permit of a type limit
	stop  chan struct{}
}

// rateHoldError asks the worker to set a task aside until its permit is due.
type rateHoldError struct{ wait time.Duration }

func (e *rateHoldError) Error() string {
	return fmt.Sprintf("framework: rate limited: permit due in %v", e.wait)
}

func (w *Worker) installRateLimits() {
	x := &rateLimits{w: w, byKey: make(map[string]*limiter), stop: make(chan struct{})}
	w.rateLimits = x
	forget := func(t *Task) {
		if p, ok := x.held.LoadAndDelete(t); ok {
			for _, l := range x.byKey {
				l.cancel(p.(*permit))
			}
		}
	}
	w.addExtension(extension{
		name:    "rate limits",
		prepare: x.prepare,
		service: func(ctx context.Context, _ *Worker) { <-ctx.Done(); close(x.stop) },
		hold: func(_ *Task, err error) (time.Duration, bool) {
			var h *rateHoldError
			if errors.As(err, &h) {
				return h.wait, true
			}
			return 0, false
		},
		finished: func(_ context.Context, t *Task, _ Outcome) { forget(t) },
	})
}

func (x *rateLimits) prepare(ctx context.Context, w *Worker) error {
	typed := false
	for _, tt := range w.order {
		typed = typed || tt.cfg.rateLimit != nil
	}
	if !typed && len(w.opts.rateLimits) == 0 {
		return nil
	}
	kv, err := ensureLimitsBucket(ctx, w.js, w.names)
	if err != nil {
		return err
	}
	x.kv = kv
	add := func(key string, l RateLimit) *limiter {
		lim := &limiter{key: key, lim: l, kv: kv, log: w.log, stop: x.stop}
		x.byKey[key] = lim
		return lim
	}
	for dep, l := range w.opts.rateLimits {
		add(limitKeyDep(dep), l)
	}
	for _, tt := range w.order {
		if tt.cfg.rateLimit != nil {
			tt.handler = x.gate(add(limitKeyType(tt.name), *tt.cfg.rateLimit), tt.handler)
		}
	}
	return nil
}

// gate runs next once the task's permit of l is due. A wait longer than
// the limit's horizon sets the task aside (rateHoldError) and keeps its
// permit for the rerun.
func (x *rateLimits) gate(l *limiter, next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		var p *permit
		if v, ok := x.held.Load(t); ok {
			p = v.(*permit)
		} else {
			p = l.request()
			x.held.Store(t, p)
		}
		h := l.lim.horizon()
		timer := time.NewTimer(h)
		select {
		case <-p.ready:
			timer.Stop()
		case <-timer.C:
			return &rateHoldError{wait: h + rand.N(h)}
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		if wait := time.Until(l.due(p)); wait > h {
			return &rateHoldError{wait: wait}
		}
		if err := sleepUntil(ctx, l.due(p)); err != nil {
			return err
		}
		x.held.Delete(t)
		return next.Handle(ctx, t)
	})
}

// waitDependency waits for a permit of dep's limit, if the worker running
// the handler of ctx has one.
func waitDependency(ctx context.Context, dep string) error {
	w := WorkerFromContext(ctx)
	if w == nil || w.rateLimits == nil {
		return nil
	}
	l := w.rateLimits.byKey[limitKeyDep(dep)]
	if l == nil {
		return nil
	}
	return l.wait(ctx, l.request())
}

// Throttle pauses the calls to dependency dep of every worker of the
// cluster for d (at most [MaxThrottle]), for example when the dependency
// answered 429 Too Many Requests with a Retry-After header
// ([handlers.DoHTTP] does this by itself). It applies to dependencies with
// a limit ([WithDependencyRateLimit]) and returns nil without one or
// outside a handler. Permits already handed out by other workers (at most
// a fraction of a second ahead) are still used.
func Throttle(ctx context.Context, dep string, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	d = min(d, MaxThrottle)
	w := WorkerFromContext(ctx)
	if w == nil || w.rateLimits == nil {
		return nil
	}
	l := w.rateLimits.byKey[limitKeyDep(dep)]
	if l == nil {
		return nil
	}
	return l.throttle(d)
}

// RateLimitInfo is the state of one cluster-wide rate limit, as
// [Inspector.RateLimits] reads it.
type RateLimitInfo struct {
	// Name is "type.<task type>" or "dep.<dependency>".
	Name string
	// Limit is the configured limit (of the last worker that reserved).
	Limit RateLimit
	// LastSecond is the number of permits reserved during the last full
	// second: compare it with the limit per second.
	LastSecond int
	// Next is when the next permit is due: in the past while the limit has
	// room.
	Next time.Time
	// ThrottledUntil is the end of the last [Throttle] pause, zero if none.
	ThrottledUntil time.Time
}

// RateLimits lists the cluster-wide rate limits that were used at least
// once. Records that fail validation are skipped.
func (i *Inspector) RateLimits(ctx context.Context) ([]RateLimitInfo, error) {
	kv, err := i.js.KeyValue(ctx, i.names.LimitsBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("framework: rate limits: %w", err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("framework: rate limits: %w", err)
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	now := time.Now()
	var out []RateLimitInfo
	for _, k := range keys {
		if !validLimitKey(k) {
			continue
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue
		}
		var r rateRecord
		if json.Unmarshal(e.Value(), &r) != nil {
			continue
		}
		l, err := RateLimit{Limit: r.Limit, Interval: time.Duration(r.IntervalNS), Burst: r.Burst}.withDefaults()
		if err != nil || !r.sane(now, l) {
			continue
		}
		last := 0
		switch now.Unix() {
		case r.Window + 1:
			last = r.Count
		case r.Window:
			last = r.Prev
		}
		info := RateLimitInfo{Name: k, Limit: l, LastSecond: last,
			Next: time.Unix(0, r.TAT).Add(-l.tolerance())}
		if r.ThrottledUntil > 0 {
			info.ThrottledUntil = time.Unix(0, r.ThrottledUntil)
		}
		out = append(out, info)
	}
	return out, nil
}

func validLimitKey(k string) bool {
	if t, ok := strings.CutPrefix(k, "type."); ok {
		return streams.ValidateTaskType(t) == nil
	}
	if d, ok := strings.CutPrefix(k, "dep."); ok {
		return ValidateDependency(d) == nil
	}
	return false
}
