package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	engine "github.com/jetflow-io/jetflow/internal/ratelimit"
	"github.com/jetflow-io/jetflow/internal/topology"
)

// Limit is a cluster-wide limit for every worker of the cluster together:
// a sustained rate of Limit permits per Interval, with Burst permits at once
// after an idle period. Every worker must declare the same values.
//
// The exact guarantee, on the permits' due times: any window of one
// Interval (both ends included) holds at most Limit + Burst of them, and
// the first Interval after an idle period holds exactly that many when the
// demand is there: Burst at once, then one every Interval/Limit up to the
// window's end. With the default Burst of 1, Limit: 20 lets 21 permits into
// a second. For a hard cap of N per Interval, declare Limit: N - Burst.
// Calls reach a dependency a little after their permit is due, so arrivals
// counted by the dependency can exceed the bound by the few that were late
// in the window before (docs/ratelimits.md).
type Limit struct {
	// Limit is the sustained rate, in permits per Interval. Required, ≥ 1.
	Limit int
	// Interval is the period Limit applies to. Default 1 s.
	Interval time.Duration
	// Burst is how many permits may be taken at once after an idle period,
	// and how many an Interval may hold beyond Limit. Default 1: permits
	// are spaced Interval/Limit apart. At most Limit.
	Burst int
}

// MaxThrottle bounds the pause [Throttle] applies.
const MaxThrottle = engine.MaxThrottle

// pluginName names the plugin on the worker ([framework.Worker.Plugin]).
const pluginName = "rate limits"

// typeKey is the key of a type's limit among its handler values.
type typeKey struct{}

// String names the option in the error of a worker without [Install].
func (typeKey) String() string { return "ratelimit.WithLimit needs ratelimit.Install" }

func (l Limit) withDefaults() (engine.Limit, error) {
	n, err := engine.Limit(l).Normalize()
	if err != nil {
		return n, fmt.Errorf("%w: %w", framework.ErrInvalidOption, err)
	}
	return n, nil
}

// WithLimit limits how often tasks of this type start, across every worker
// of the cluster, on a worker with [Install]. A task over the limit waits
// for its permit without spending an attempt: in place for a short wait,
// otherwise set aside (its slot serves other tasks, heartbeats keep it
// alive) until its permit is due, like a task held by an open circuit
// breaker. Without [Install] the worker's Start fails with
// [framework.ErrInvalidOption]. An invalid limit makes Register panic.
func WithLimit(l Limit) framework.HandlerOption {
	n, err := l.withDefaults()
	if err != nil {
		return framework.InvalidHandlerOption(err)
	}
	return framework.WithHandlerValue(typeKey{}, n)
}

// Option configures [Install].
type Option func(*config) error

type config struct {
	deps map[string]engine.Limit
}

// WithDependency limits the calls to dependency dep made through package
// breaker's Call (and so handlers.DoHTTP) across every worker of the
// cluster; see [Wait]. A call over the limit waits inside Call, without
// spending an attempt, until its permit is due or ctx ends.
func WithDependency(dep string, l Limit) Option {
	return func(c *config) error {
		if err := topology.ValidateDependency(dep); err != nil {
			return fmt.Errorf("%w: %w", framework.ErrInvalidOption, err)
		}
		n, err := l.withDefaults()
		if err != nil {
			return fmt.Errorf("dependency %s: %w", dep, err)
		}
		c.deps[dep] = n
		return nil
	}
}

// limits holds a worker's limiters.
type limits struct {
	deps  map[string]engine.Limit
	types map[string]*typeGate       // by task type, fixed at Start
	byKey map[string]*engine.Limiter // fixed after prepare
	gate  engine.Gate                // *Task → permit of a type limit
	stop  chan struct{}
	keys  keyLimiters // per-key limits (keys.go)
	// keyTypes counts the types with a per-key limit, fixed at Start.
	keyTypes int
	kv       jetstream.KeyValue
	log      *slog.Logger
}

// typeGate is a type's limit; lim is set at prepare.
type typeGate struct {
	limit engine.Limit
	lim   *engine.Limiter
}

// holdError asks the worker to set a task aside until its permit is due.
type holdError struct{ wait time.Duration }

func (e *holdError) Error() string {
	return fmt.Sprintf("framework: rate limited: permit due in %v", e.wait)
}

// Install gives w its rate limits: the dependency limits of opts and the
// type limits its handlers declare with [WithLimit]. Call it before Start;
// Start then creates the limits bucket ([github.com/jetflow-io/jetflow/streams.Names.LimitsBucket]) when
// there is a limit. It returns an error wrapping
// [framework.ErrInvalidOption] for an invalid option and panics when
// called twice on one worker or after Start.
func Install(w *framework.Worker, opts ...Option) error {
	c := config{deps: make(map[string]engine.Limit)}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return err
		}
	}
	x := &limits{deps: c.deps, types: make(map[string]*typeGate), byKey: make(map[string]*engine.Limiter),
		stop: make(chan struct{}), keys: keyLimiters{byID: make(map[string]*keyLimiter)}}
	w.Use(framework.Plugin{
		Name:    pluginName,
		Value:   x,
		Keys:    []any{typeKey{}, keyLimitKey{}},
		Wrap:    x.wrap,
		Prepare: x.prepare,
		Service: func(ctx context.Context, _ *framework.Worker) { x.sweepKeys(ctx); close(x.stop) },
		Hold: func(_ *framework.Task, err error) (time.Duration, bool) {
			var h *holdError
			if errors.As(err, &h) {
				return h.wait, true
			}
			return 0, false
		},
		Finished: func(_ context.Context, t *framework.Task, _ framework.Outcome) {
			x.gate.Forget(t, x.byKey)
			x.keys.forget(t)
		},
	})
	return nil
}

// wrap gates the handler of a type with a limit: it runs once the task's
// permit is due. A wait longer than the limit's horizon sets the task aside
// (holdError) and keeps its permit for the rerun.
func (x *limits) wrap(w *framework.Worker, taskType string, next framework.Handler) framework.Handler {
	if ks := w.HandlerValues(taskType, keyLimitKey{}); len(ks) > 0 {
		x.keyTypes++
		next = x.wrapKeys(ks[len(ks)-1].(engine.Limit), next)
	}
	vs := w.HandlerValues(taskType, typeKey{})
	if len(vs) == 0 {
		return next
	}
	g := &typeGate{limit: vs[len(vs)-1].(engine.Limit)}
	x.types[taskType] = g
	return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
		hold, err := x.gate.Admit(ctx, g.lim, t)
		if err != nil {
			return err
		}
		if hold > 0 {
			return &holdError{wait: hold}
		}
		return next.Handle(ctx, t)
	})
}

// wrapKeys gates next with the per-key limit l: it runs once the permit
// of its task's key is due.
func (x *limits) wrapKeys(l engine.Limit, next framework.Handler) framework.Handler {
	return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
		hold, err := x.admitKey(ctx, l, t) // keys.go
		if err != nil {
			return err
		}
		if hold > 0 {
			return &holdError{wait: hold}
		}
		return next.Handle(ctx, t)
	})
}

// prepare creates the limiters, and the bucket when there is a limit.
func (x *limits) prepare(ctx context.Context, w *framework.Worker) error {
	if len(x.types) == 0 && len(x.deps) == 0 && x.keyTypes == 0 {
		return nil
	}
	names := w.Names()
	kv, err := engine.EnsureBucket(ctx, w.JetStream(), names.LimitsBucket(), names.TaskStream())
	if err != nil {
		return err
	}
	x.kv, x.log = kv, w.Logger()
	add := func(key string, l engine.Limit) *engine.Limiter {
		lim := engine.NewLimiter(key, l, kv, w.Logger(), x.stop)
		x.byKey[key] = lim
		return lim
	}
	for dep, l := range x.deps {
		add(engine.KeyDep(dep), l)
	}
	for _, taskType := range w.Types() {
		if g := x.types[taskType]; g != nil {
			g.lim = add(engine.KeyType(taskType), g.limit)
		}
	}
	return nil
}

// dependencyLimiter returns the limiter of dep of the worker running the
// handler of ctx, nil without one.
func dependencyLimiter(ctx context.Context, dep string) *engine.Limiter {
	w := framework.TaskFromContext(ctx).Worker()
	if w == nil {
		return nil
	}
	v, ok := w.Plugin(pluginName)
	if !ok {
		return nil
	}
	return v.(*limits).byKey[engine.KeyDep(dep)]
}

// Wait waits for a permit of dep's rate limit ([WithDependency]) if the
// worker running the handler of ctx has one, and returns ctx's error if it
// ends first. It returns nil at once without a limit or outside a handler.
// Package breaker's Call calls it before the breaker; without breakers,
// call Wait yourself before each call to the dependency:
//
//	if err := ratelimit.Wait(ctx, "payments-gw"); err != nil {
//		return err
//	}
//	resp, err := gateway.Charge(ctx, req)
//
// It needs only [Install] with [WithDependency]: no breaker.
func Wait(ctx context.Context, dep string) error {
	l := dependencyLimiter(ctx, dep)
	if l == nil {
		return nil
	}
	return l.Wait(ctx, l.Request())
}

// Throttle pauses the calls to dependency dep of every worker of the
// cluster for d (at most [MaxThrottle]), for example when the dependency
// answered 429 Too Many Requests with a Retry-After header
// (handlers.DoHTTP does this by itself). It applies to dependencies with a
// limit ([WithDependency]) and returns nil without one or outside a
// handler. Permits already handed out by other workers (at most a fraction
// of a second ahead) are still used.
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
