package ratelimit

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/natserr"
)

const logKeyError = "error"

// Permit is one waiter's claim on a limiter.
type Permit struct {
	ready chan struct{} // closed once granted
	due   time.Time     // set before ready is closed
}

// Limiter hands out the permits of one limit to the waiters of one process.
type Limiter struct {
	key  string
	lim  Limit
	kv   jetstream.KeyValue
	log  *slog.Logger
	stop <-chan struct{}

	mu      sync.Mutex
	queue   []*Permit // not yet granted, oldest first
	running bool      // the reserving goroutine runs
	pauseTo time.Time // local end of a Throttle this process asked for

	// Guarded by updMu: the cached record and its revision.
	updMu   sync.Mutex
	rec     Record
	rev     uint64
	haveRec bool
}

// NewLimiter returns the limiter of the limit stored under key in kv. Its
// reserving goroutine ends when stop is closed.
func NewLimiter(key string, lim Limit, kv jetstream.KeyValue, log *slog.Logger, stop <-chan struct{}) *Limiter {
	return &Limiter{key: key, lim: lim, kv: kv, log: log, stop: stop}
}

// Limit returns the limiter's limit.
func (l *Limiter) Limit() Limit { return l.lim }

// Request queues a permit and makes sure the reserving goroutine runs.
func (l *Limiter) Request() *Permit {
	p := &Permit{ready: make(chan struct{})}
	l.mu.Lock()
	l.queue = append(l.queue, p)
	if !l.running {
		l.running = true
		go l.run()
	}
	l.mu.Unlock()
	return p
}

// Idle reports whether l has no waiter and no reservation under way.
func (l *Limiter) Idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.running && len(l.queue) == 0
}

// Cancel removes p if it was not granted yet.
func (l *Limiter) Cancel(p *Permit) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range l.queue {
		if q == p {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			return
		}
	}
}

// Wait blocks until p is granted and due, or ctx ends.
func (l *Limiter) Wait(ctx context.Context, p *Permit) error {
	select {
	case <-p.ready:
	case <-ctx.Done():
		l.Cancel(p)
		return ctx.Err()
	}
	return SleepUntil(ctx, l.Due(p))
}

// Due returns when a granted p may be used: its reserved time, or later
// when this process asked for a pause since.
func (l *Limiter) Due(p *Permit) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pauseTo.After(p.due) {
		return l.pauseTo
	}
	return p.due
}

// SleepUntil waits until t or until ctx ends.
func SleepUntil(ctx context.Context, t time.Time) error {
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
func (l *Limiter) run() {
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
				slog.Duration("retry_in", retry), slog.Any(logKeyError, err))
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
func (l *Limiter) abandon() {
	l.mu.Lock()
	l.running = false
	l.mu.Unlock()
}

func (l *Limiter) sleep(d time.Duration) bool {
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
func (l *Limiter) load(ctx context.Context) error {
	e, err := l.kv.Get(ctx, l.key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		l.rec, l.rev, l.haveRec = Record{}, 0, true
		if e != nil {
			l.rev = e.Revision() // a delete marker: update at its revision
		}
		return nil
	case err != nil:
		return err
	}
	var r Record
	if json.Unmarshal(e.Value(), &r) != nil || !r.Sane(time.Now(), l.lim) {
		l.log.Warn("jetflow rate limit: invalid record in the limits bucket; starting afresh", slog.String("limit", l.key))
		r = Record{}
	}
	l.rec, l.rev, l.haveRec = r, e.Revision(), true
	return nil
}

// store writes rec at the cached revision; a conflict reports false.
func (l *Limiter) store(ctx context.Context, rec Record) (bool, error) {
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
func (l *Limiter) update(f func(now time.Time, rec *Record) bool) error {
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
func (l *Limiter) reserve(n int) (dues []time.Time, next time.Time, err error) {
	T, tau, h := l.lim.Emission(), l.lim.Tolerance(), l.lim.Horizon()
	l.updMu.Lock()
	defer l.updMu.Unlock()
	err = l.update(func(now time.Time, rec *Record) bool {
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

// Throttle pushes the next permit of every process to at least now+d.
func (l *Limiter) Throttle(d time.Duration) error {
	until := time.Now().Add(d)
	l.mu.Lock()
	if until.After(l.pauseTo) {
		l.pauseTo = until
	}
	l.mu.Unlock()
	tau := l.lim.Tolerance()
	// Serialised with run's reservations on the cached record.
	l.updMu.Lock()
	defer l.updMu.Unlock()
	return l.update(func(_ time.Time, rec *Record) bool {
		tat := until.Add(tau).UnixNano()
		if rec.TAT >= tat {
			return false
		}
		rec.TAT = tat
		rec.ThrottledUntil = max(rec.ThrottledUntil, until.UnixNano())
		return true
	})
}
