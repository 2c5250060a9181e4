package ratelimit_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/breaker"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/ratelimit"
	"github.com/jetflow-io/jetflow/streams"
)

// Two workers on separate connections share one limit: n tasks with a
// limit of 20 per second (burst 1) cannot all start before (n-1)/20 s have
// passed since the first enqueue, and waiting spends no attempt.
func TestRateLimitTypeIsClusterWide(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 30
	lim := ratelimit.Limit{Limit: 20, Interval: time.Second}
	var mu sync.Mutex
	var starts []time.Time
	attempts := map[int]bool{}
	done := make(chan struct{}, n)
	for range 2 {
		w := e.worker(t)
		w.HandleFunc("limited.job", func(_ context.Context, task *framework.Task) error {
			mu.Lock()
			starts = append(starts, time.Now())
			attempts[task.Attempt] = true
			mu.Unlock()
			done <- struct{}{}
			return nil
		}, ratelimit.WithLimit(lim))
		startWorker(t, w)
	}
	begin := time.Now()
	for i := range n {
		e.Enqueue(t, "limited.job", i)
	}
	for i := range n {
		select {
		case <-done:
		case <-time.After(waitLong):
			t.Fatalf("%d of %d tasks ran", i, n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	slices.SortFunc(starts, func(a, b time.Time) int { return a.Compare(b) })
	// GCRA: permit k is due no earlier than k emission intervals after the
	// first reservation, which follows the first enqueue.
	if min := time.Duration(n-1) * lim.Interval / time.Duration(lim.Limit); starts[n-1].Sub(begin) < min {
		t.Fatalf("%d tasks started within %v of the first enqueue, the limit allows no less than %v", n, starts[n-1].Sub(begin), min)
	}
	if len(attempts) != 1 || !attempts[1] {
		t.Fatalf("attempts seen %v, want only 1: waiting for a permit must not spend attempts", attempts)
	}
	infos, err := inspect.New(e.Client).RateLimits(t.Context())
	if err != nil || len(infos) != 1 {
		t.Fatalf("RateLimits = %+v, %v", infos, err)
	}
	if got := infos[0]; got.Name != "type.limited.job" || got.Limit.Limit != 20 || got.Limit.Burst != 1 || got.Limit.Interval != time.Second {
		t.Fatalf("rate limit info %+v", got)
	}
}

// A dependency limit applies to breaker.Call, and Throttle from one worker
// delays the next call of another.
func TestRateLimitDependencyThrottle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lim := ratelimit.Limit{Limit: 1000, Interval: time.Second, Burst: 10}
	type call struct {
		at    time.Time
		until time.Time
	}
	calls := make(chan call, 4)
	for range 2 {
		w := e.worker(t, ratelimit.WithDependency("gw", lim))
		if _, err := breaker.Install(w); err != nil {
			t.Fatal(err)
		}
		w.HandleFunc("dep.job", func(ctx context.Context, task *framework.Task) error {
			return breaker.Call(ctx, "gw", func(ctx context.Context) error {
				c := call{at: time.Now()}
				if task.Header("X-Throttle") != "" {
					c.until = time.Now().Add(2 * time.Second)
					if err := ratelimit.Throttle(ctx, "gw", 2*time.Second); err != nil {
						return framework.Permanent(err)
					}
				}
				calls <- c
				return nil
			})
		})
		startWorker(t, w)
	}
	e.Enqueue(t, "dep.job", nil, framework.WithHeader("X-Throttle", "1"))
	var first call
	select {
	case first = <-calls:
	case <-time.After(waitLong):
		t.Fatal("first call did not happen")
	}
	// Both workers are idle: whichever takes the next tasks reserves after
	// the throttle.
	for range 3 {
		e.Enqueue(t, "dep.job", nil)
	}
	for range 3 {
		select {
		case c := <-calls:
			if c.at.Before(first.until) {
				t.Fatalf("call at %v, before the throttle ended at %v", c.at.Format(time.StampMicro), first.until.Format(time.StampMicro))
			}
		case <-time.After(waitLong):
			t.Fatal("calls after the throttle did not happen")
		}
	}
	infos, err := inspect.New(e.Client).RateLimits(t.Context())
	if err != nil || len(infos) != 1 || infos[0].Name != "dep.gw" || infos[0].ThrottledUntil.IsZero() {
		t.Fatalf("RateLimits = %+v, %v", infos, err)
	}
}

// A record in the limits bucket is read from the wire: one that would block
// the limit for a century, or is not JSON, is replaced.
func TestRateLimitIgnoresHostileRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := streams.MustNames("")
	if err := framework.EnsureBuckets(t.Context(), e.JS); err != nil {
		t.Fatal(err)
	}
	kv, err := e.JS.KeyValue(t.Context(), names.LimitsBucket())
	if err != nil {
		t.Fatal(err)
	}
	far, _ := json.Marshal(map[string]any{"tat": time.Now().Add(100 * 365 * 24 * time.Hour).UnixNano(), "limit": 1, "interval_ns": 1})
	if _, err := kv.Put(t.Context(), "type.hostile.far", far); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(t.Context(), "type.hostile.junk", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	done := make(chan string, 2)
	w := e.worker(t)
	for _, tt := range []string{"hostile.far", "hostile.junk"} {
		w.HandleFunc(tt, func(context.Context, *framework.Task) error { done <- tt; return nil },
			ratelimit.WithLimit(ratelimit.Limit{Limit: 100}))
	}
	startWorker(t, w)
	e.Enqueue(t, "hostile.far", nil)
	e.Enqueue(t, "hostile.junk", nil)
	for range 2 {
		select {
		case <-done:
		case <-time.After(waitLong):
			t.Fatal("a task behind a hostile limit record never ran")
		}
	}
}

func TestRateLimitOptionErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for name, l := range map[string]ratelimit.Limit{
		"zero limit":    {},
		"burst > limit": {Limit: 2, Burst: 3},
		"tiny interval": {Limit: 1, Interval: time.Microsecond},
		"too fast":      {Limit: 10_000_000},
	} {
		w, err := framework.NewWorker(e.Conn)
		if err != nil {
			t.Fatal(err)
		}
		if err := ratelimit.Install(w, ratelimit.WithDependency("gw", l)); !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", name, err)
		}
	}
	w, err := framework.NewWorker(e.Conn)
	if err != nil {
		t.Fatal(err)
	}
	if err := ratelimit.Install(w, ratelimit.WithDependency("bad dep", ratelimit.Limit{Limit: 1})); !errors.Is(err, framework.ErrInvalidOption) {
		t.Errorf("invalid dependency name: %v", err)
	}
}

// An invalid type limit is a programmer error: Register panics with an
// error wrapping ErrInvalidOption, as it did for every invalid option.
func TestWithLimitInvalidPanics(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t)
	defer func() {
		r := recover()
		if r == nil || !strings.Contains(fmt.Sprint(r), framework.ErrInvalidOption.Error()) {
			t.Fatalf("Register recovered %v, want a panic naming ErrInvalidOption", r)
		}
	}()
	w.HandleFunc("bad.limit", func(context.Context, *framework.Task) error { return nil },
		ratelimit.WithLimit(ratelimit.Limit{Limit: 2, Burst: 3}))
}

// TestWaitAloneLimitsADependency: a handler on a worker with Install and
// WithDependency, and no breakers, calls Wait before each call: with one
// permit an hour, the first call goes through and the second waits until
// its context ends (docs/ratelimits.md, "A dependency without breakers").
func TestWaitAloneLimitsADependency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	w := e.worker(t, ratelimit.WithDependency("smtp", ratelimit.Limit{Limit: 1, Interval: time.Hour}))
	errs := make(chan error, 2)
	w.HandleFunc("mail.send", func(ctx context.Context, task *framework.Task) error {
		errs <- ratelimit.Wait(ctx, "smtp")
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		errs <- ratelimit.Wait(short, "smtp")
		return nil
	})
	startWorker(t, w)
	e.Enqueue(t, "mail.send", nil)
	for i, want := range []error{nil, context.DeadlineExceeded} {
		select {
		case err := <-errs:
			if !errors.Is(err, want) && err != want {
				t.Errorf("call %d: Wait = %v, want %v", i+1, err, want)
			}
		case <-time.After(waitLong):
			t.Fatalf("call %d: Wait did not return", i+1)
		}
	}
	infos, err := inspect.New(e.Client).RateLimits(t.Context())
	if err != nil || len(infos) != 1 || infos[0].Name != "dep.smtp" {
		t.Fatalf("RateLimits = %+v, %v", infos, err)
	}
}
