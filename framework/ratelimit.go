package framework

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/ratelimit"
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
const MaxThrottle = ratelimit.MaxThrottle

func (l RateLimit) withDefaults() (RateLimit, error) {
	n, err := l.internal().Normalize()
	if err != nil {
		return l, fmt.Errorf("%w: %w", ErrInvalidOption, err)
	}
	return RateLimit(n), nil
}

func (l RateLimit) internal() ratelimit.Limit { return ratelimit.Limit(l) }

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
// package breaker's Call (and so [handlers.DoHTTP]) across every worker of
// the cluster; see [WaitDependency]. A
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

// ---- worker wiring ----

// rateLimits holds a worker's limiters.
type rateLimits struct {
	byKey map[string]*ratelimit.Limiter // fixed after prepare
	gate  ratelimit.Gate                // *Task → permit of a type limit
	stop  chan struct{}
}

// rateHoldError asks the worker to set a task aside until its permit is due.
type rateHoldError struct{ wait time.Duration }

func (e *rateHoldError) Error() string {
	return fmt.Sprintf("framework: rate limited: permit due in %v", e.wait)
}

func (w *Worker) installRateLimits() {
	x := &rateLimits{byKey: make(map[string]*ratelimit.Limiter), stop: make(chan struct{})}
	w.rateLimits = x
	w.addExtension(extension{Plugin: Plugin{
		Name:    "rate limits",
		Prepare: x.prepare,
		Service: func(ctx context.Context, _ *Worker) { <-ctx.Done(); close(x.stop) },
		Hold: func(_ *Task, err error) (time.Duration, bool) {
			var h *rateHoldError
			if errors.As(err, &h) {
				return h.wait, true
			}
			return 0, false
		},
		Finished: func(_ context.Context, t *Task, _ Outcome) { x.gate.Forget(t, x.byKey) },
	}})
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
	add := func(key string, l RateLimit) *ratelimit.Limiter {
		lim := ratelimit.NewLimiter(key, l.internal(), kv, w.log, x.stop)
		x.byKey[key] = lim
		return lim
	}
	for dep, l := range w.opts.rateLimits {
		add(ratelimit.KeyDep(dep), l)
	}
	for _, tt := range w.order {
		if tt.cfg.rateLimit != nil {
			tt.handler = x.gated(add(ratelimit.KeyType(tt.name), *tt.cfg.rateLimit), tt.handler)
		}
	}
	return nil
}

// gated runs next once the task's permit of l is due. A wait longer than
// the limit's horizon sets the task aside (rateHoldError) and keeps its
// permit for the rerun.
func (x *rateLimits) gated(l *ratelimit.Limiter, next Handler) Handler {
	return HandlerFunc(func(ctx context.Context, t *Task) error {
		hold, err := x.gate.Admit(ctx, l, t)
		if err != nil {
			return err
		}
		if hold > 0 {
			return &rateHoldError{wait: hold}
		}
		return next.Handle(ctx, t)
	})
}

// dependencyLimiter returns the limiter of dep of the worker running the
// handler of ctx, nil without one.
func dependencyLimiter(ctx context.Context, dep string) *ratelimit.Limiter {
	w := WorkerFromContext(ctx)
	if w == nil || w.rateLimits == nil {
		return nil
	}
	return w.rateLimits.byKey[ratelimit.KeyDep(dep)]
}

// WaitDependency waits for a permit of dep's rate limit
// ([WithDependencyRateLimit]) if the worker running the handler of ctx has
// one, and returns ctx's error if it ends first. It returns nil at once
// without a limit or outside a handler. Package breaker's Call calls it
// before the breaker.
func WaitDependency(ctx context.Context, dep string) error {
	l := dependencyLimiter(ctx, dep)
	if l == nil {
		return nil
	}
	return l.Wait(ctx, l.Request())
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
	l := dependencyLimiter(ctx, dep)
	if l == nil {
		return nil
	}
	return l.Throttle(min(d, MaxThrottle))
}

// ensureLimitsBucket creates the limits bucket if needed and returns it.
func ensureLimitsBucket(ctx context.Context, js jetstream.JetStream, names streams.Names) (jetstream.KeyValue, error) {
	return ratelimit.EnsureBucket(ctx, js, names.LimitsBucket(), names.TaskStream())
}
