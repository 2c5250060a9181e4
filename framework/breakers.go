package framework

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"

	"github.com/jetflow-io/jetflow/internal/circuit"
)

// The breaker registry: one breaker per dependency, its engine in
// internal/circuit.

// Breakers is a registry of circuit breakers, one per dependency name,
// created on first use. A worker has one ([Worker.Breakers]) that [Call]
// uses inside handlers; [NewBreakers] makes a standalone one for code that
// runs outside handlers. It is safe for concurrent use.
type Breakers struct {
	declared map[string]BreakerSettings
	hook     func(ctx context.Context, dep string, from, to BreakerState)
	log      *slog.Logger
	notify   func(dep string, ev circuit.Event) // set by a worker (circuit.Cluster); nil otherwise

	mu sync.Mutex // serialises creation
	m  sync.Map   // dependency → *breaker
}

// NewBreakers returns a standalone registry, configured by [WithBreaker],
// [WithLogger] and [WithHooks] (only its BreakerStateChanged field is
// called). A standalone registry is local to the process: it
// pauses no consumer and publishes nothing.
func NewBreakers(opts ...BreakersOption) (*Breakers, error) {
	o, err := newOptions(opts, BreakersOption.applyBreakers)
	if err != nil {
		return nil, err
	}
	return newBreakers(o), nil
}

func newBreakers(o *options) *Breakers {
	r := &Breakers{declared: o.breakers, hook: o.hooks.BreakerStateChanged, log: o.logger}
	deps := make([]string, 0, len(o.breakers))
	for d := range o.breakers {
		deps = append(deps, d)
	}
	slices.Sort(deps)
	for _, d := range deps {
		r.m.Store(d, r.newBreaker(d))
	}
	return r
}

// get returns the breaker of dep, creating it on first use.
func (r *Breakers) get(dep string) (*breaker, error) {
	if b, ok := r.m.Load(dep); ok {
		return b.(*breaker), nil
	}
	if err := ValidateDependency(dep); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.m.Load(dep); ok {
		return b.(*breaker), nil
	}
	b := r.newBreaker(dep)
	r.m.Store(dep, b)
	return b, nil
}

// Call runs fn through the breaker of dep. See [Call].
func (r *Breakers) Call(ctx context.Context, dep string, fn func(ctx context.Context) error) error {
	b, err := r.get(dep)
	if err != nil {
		return err
	}
	return b.call(ctx, fn)
}

// State returns the breaker of dep, and false if dep was neither declared
// nor used yet.
func (r *Breakers) State(dep string) (BreakerInfo, bool) {
	v, ok := r.m.Load(dep)
	if !ok {
		return BreakerInfo{}, false
	}
	return v.(*breaker).info(), true
}

// States returns every breaker declared or used so far, sorted by
// dependency name.
func (r *Breakers) States() []BreakerInfo {
	var out []BreakerInfo
	r.m.Range(func(_, v any) bool {
		out = append(out, v.(*breaker).info())
		return true
	})
	slices.SortFunc(out, func(a, b BreakerInfo) int {
		switch {
		case a.Dependency < b.Dependency:
			return -1
		case a.Dependency > b.Dependency:
			return 1
		}
		return 0
	})
	return out
}

func (r *Breakers) deliver(ctx context.Context, dep string, ev circuit.Event) {
	lvl := slog.LevelInfo
	if ev.To == circuit.Open {
		lvl = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String(LogKeyDependency, dep), slog.String("from", ev.From.String()),
		slog.String("to", ev.To.String()), slog.Bool("remote", ev.Remote)}
	if ev.To == circuit.Open {
		attrs = append(attrs, slog.Time("until", ev.Until), slog.Uint64("failures", uint64(ev.Failures)))
	}
	r.log.LogAttrs(ctx, lvl, "jetflow circuit breaker state changed", attrs...)
	if r.notify != nil {
		r.notify(dep, ev)
	}
	if r.hook != nil {
		callHook(r.log, nil, "BreakerStateChanged", func() { r.hook(ctx, dep, BreakerState(ev.From), BreakerState(ev.To)) })
	}
}

// LogKeyDependency is the log attribute key of a dependency name.
const LogKeyDependency = "dependency"

// breaker is the breaker of one dependency: its settings and the engine
// (internal/circuit) reporting to the registry.
type breaker struct {
	name     string
	settings BreakerSettings
	eng      *circuit.Breaker
}

func (r *Breakers) newBreaker(dep string) *breaker {
	s, ok := r.declared[dep]
	if !ok {
		s = BreakerSettings{}
	}
	s = s.withDefaults()
	b := &breaker{name: dep, settings: s}
	b.eng = circuit.New(dep, circuit.Settings{
		ConsecutiveFailures: s.ConsecutiveFailures, FailureRatio: s.FailureRatio, MinRequests: s.MinRequests,
		Interval: s.Interval, OpenTimeout: s.OpenTimeout, HalfOpenMaxRequests: s.HalfOpenMaxRequests,
	}, b.classify, func(ctx context.Context, ev circuit.Event) {
		r.deliver(ctx, dep, ev)
	})
	return b
}

// call runs fn through the breaker; a refusal, or a failure that left the
// breaker open, is a *[BreakerOpenError].
func (b *breaker) call(ctx context.Context, fn func(ctx context.Context) error) error {
	err := b.eng.Call(ctx, fn)
	if oe, ok := err.(*circuit.OpenError); ok {
		return &BreakerOpenError{Dependency: b.name, Until: oe.Until, Err: oe.Err}
	}
	return err
}

// classify says how a call's error counts: a call cancelled with its
// context, or refused by another breaker, does not count; a failure
// counts when the settings' IsFailure says so.
func (b *breaker) classify(ctx context.Context, err error) circuit.Outcome {
	switch {
	case ctx.Err() != nil && errors.Is(err, context.Canceled), errors.Is(err, ErrBreakerOpen):
		return circuit.Excluded
	case b.settings.IsFailure(err):
		return circuit.Failure
	}
	return circuit.Success
}

// forceOpen opens the breaker on another worker's report.
func (b *breaker) forceOpen() bool { return b.eng.ForceOpen() }

func (b *breaker) info() BreakerInfo {
	in := b.eng.Info()
	c := in.Counts
	return BreakerInfo{
		Dependency: b.name,
		State:      BreakerState(in.State),
		Counts: BreakerCounts{
			Requests: c.Requests, Successes: c.TotalSuccesses, Failures: c.TotalFailures, Exclusions: c.TotalExclusions,
			ConsecutiveSuccesses: c.ConsecutiveSuccesses, ConsecutiveFailures: c.ConsecutiveFailures,
		},
		Settings:  b.settings,
		OpenedAt:  in.OpenedAt,
		OpenUntil: in.OpenUntil,
		Remote:    in.Remote,
	}
}
