package breaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/circuit"
	"github.com/jetflow-io/jetflow/internal/topology"
)

// The breaker registry: one breaker per dependency, its engine in
// internal/circuit.

// Registry is a registry of circuit breakers, one per dependency name,
// created on first use. A worker has one once breakers are installed on it
// ([Install], [Of]), which [Call] uses inside its handlers; [New] makes a
// standalone one for code that runs outside handlers. It is safe for
// concurrent use.
type Registry struct {
	declared map[string]Settings
	hook     func(ctx context.Context, dep string, from, to State)
	log      *slog.Logger
	notify   func(dep string, ev circuit.Event) // set by a worker (circuit.Cluster); nil otherwise

	mu     sync.Mutex // serialises creation
	m      sync.Map   // dependency → *breaker
	remote int        // breakers created on remote reports (getRemote); under mu
}

// maxRemoteBreakers bounds the breakers a registry creates on other
// workers' reports for dependencies it has neither declared nor used: their
// names are the keys of the breaker bucket, which whoever may write it
// chooses, and each would cost memory and a metrics series for good.
const maxRemoteBreakers = 256

// Option configures a registry: [New] or [Install].
type Option func(*config) error

type config struct {
	settings map[string]Settings
	log      *slog.Logger
	hook     func(ctx context.Context, dep string, from, to State)
}

// WithSettings declares the circuit breaker settings of dependency dep.
// Dependencies used without a declaration get the defaults.
func WithSettings(dep string, s Settings) Option {
	return func(c *config) error {
		if err := topology.ValidateDependency(dep); err != nil {
			return fmt.Errorf("%w: %w", framework.ErrInvalidOption, err)
		}
		if err := s.validate(); err != nil {
			return fmt.Errorf("breaker %s: %w", dep, err)
		}
		c.settings[dep] = s
		return nil
	}
}

// WithLogger sets the logger of state changes. Default: discarded by [New],
// the worker's ([framework.WithLogger]) by [Install].
func WithLogger(l *slog.Logger) Option {
	return func(c *config) error {
		if l == nil {
			return fmt.Errorf("%w: nil logger", framework.ErrInvalidOption)
		}
		c.log = l
		return nil
	}
}

// WithStateChanged calls fn when a breaker changes state, like the
// [StateChange] event [Install] publishes to the Event field of the
// worker's [framework.Hooks]. A panic in fn is recovered and logged.
func WithStateChanged(fn func(ctx context.Context, dep string, from, to State)) Option {
	return func(c *config) error {
		c.hook = fn
		return nil
	}
}

func newConfig(opts []Option) (*config, error) {
	c := &config{settings: make(map[string]Settings)}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// New returns a standalone registry, configured by [WithSettings],
// [WithLogger] and [WithStateChanged]. A standalone registry is local to
// the process: it pauses no consumer and publishes nothing.
func New(opts ...Option) (*Registry, error) {
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return newRegistry(c), nil
}

func newRegistry(c *config) *Registry {
	r := &Registry{declared: c.settings, hook: c.hook, log: c.log}
	deps := make([]string, 0, len(c.settings))
	for d := range c.settings {
		deps = append(deps, d)
	}
	slices.Sort(deps)
	for _, d := range deps {
		r.m.Store(d, r.newBreaker(d))
	}
	return r
}

// get returns the breaker of dep, creating it on first use.
func (r *Registry) get(dep string) (*breaker, error) { return r.lookup(dep, false) }

// getRemote is get for a dependency another worker reported open: it
// creates at most maxRemoteBreakers breakers in all.
func (r *Registry) getRemote(dep string) (*breaker, error) { return r.lookup(dep, true) }

func (r *Registry) lookup(dep string, remote bool) (*breaker, error) {
	if b, ok := r.m.Load(dep); ok {
		return b.(*breaker), nil
	}
	if err := topology.ValidateDependency(dep); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.m.Load(dep); ok {
		return b.(*breaker), nil
	}
	if remote {
		if r.remote >= maxRemoteBreakers {
			return nil, fmt.Errorf("breaker: %d breakers already opened on other workers' reports; %s ignored", r.remote, dep)
		}
		r.remote++
		if r.remote == maxRemoteBreakers {
			r.log.Warn("jetflow opened breakers for as many dependencies as it takes from other workers' reports; reports of further dependencies this worker never used are ignored",
				slog.Int("limit", maxRemoteBreakers))
		}
	}
	b := r.newBreaker(dep)
	r.m.Store(dep, b)
	return b, nil
}

// Call runs fn through the breaker of dep. See [Call].
func (r *Registry) Call(ctx context.Context, dep string, fn func(ctx context.Context) error) error {
	b, err := r.get(dep)
	if err != nil {
		return err
	}
	return b.call(ctx, fn)
}

// State returns the state of the breaker of dep, and false if dep was neither declared
// nor used yet.
func (r *Registry) State(dep string) (Info, bool) {
	v, ok := r.m.Load(dep)
	if !ok {
		return Info{}, false
	}
	return v.(*breaker).info(), true
}

// States returns every breaker declared or used so far, sorted by
// dependency name.
func (r *Registry) States() []Info {
	var out []Info
	r.m.Range(func(_, v any) bool {
		out = append(out, v.(*breaker).info())
		return true
	})
	slices.SortFunc(out, func(a, b Info) int {
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

func (r *Registry) deliver(ctx context.Context, dep string, ev circuit.Event) {
	lvl := slog.LevelInfo
	if ev.To == circuit.Open {
		lvl = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String(framework.LogKeyDependency, dep), slog.String("from", ev.From.String()),
		slog.String("to", ev.To.String()), slog.Bool("remote", ev.Remote)}
	if ev.To == circuit.Open {
		attrs = append(attrs, slog.Time("until", ev.Until), slog.Uint64("failures", uint64(ev.Failures)))
	}
	r.log.LogAttrs(ctx, lvl, "jetflow circuit breaker state changed", attrs...)
	if r.notify != nil {
		r.notify(dep, ev)
	}
	if r.hook != nil {
		r.callHook(ctx, dep, State(ev.From), State(ev.To))
	}
}

// callHook calls the WithStateChanged hook, recovering a panic.
func (r *Registry) callHook(ctx context.Context, dep string, from, to State) {
	defer func() {
		if v := recover(); v != nil {
			r.log.Error("jetflow hook panicked; ignored", slog.String("hook", "WithStateChanged"), slog.Any("panic", v),
				slog.String("stack", string(debug.Stack())))
		}
	}()
	r.hook(ctx, dep, from, to)
}

// breaker is the breaker of one dependency: its settings and the engine
// (internal/circuit) reporting to the registry.
type breaker struct {
	name     string
	settings Settings
	eng      *circuit.Breaker
}

func (r *Registry) newBreaker(dep string) *breaker {
	s, ok := r.declared[dep]
	if !ok {
		s = Settings{}
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
// breaker open, is a *[OpenError].
func (b *breaker) call(ctx context.Context, fn func(ctx context.Context) error) error {
	err := b.eng.Call(ctx, fn)
	if oe, ok := err.(*circuit.OpenError); ok {
		return &OpenError{Dependency: b.name, Until: oe.Until, Err: oe.Err}
	}
	return err
}

// classify says how a call's error counts: a call cancelled with its
// context, or refused by another breaker, does not count; a failure
// counts when the settings' IsFailure says so.
func (b *breaker) classify(ctx context.Context, err error) circuit.Outcome {
	switch {
	case ctx.Err() != nil && errors.Is(err, context.Canceled), errors.Is(err, ErrOpen):
		return circuit.Excluded
	case b.settings.IsFailure(err):
		return circuit.Failure
	}
	return circuit.Success
}

// forceOpen opens the breaker on another worker's report.
func (b *breaker) forceOpen() bool { return b.eng.ForceOpen() }

func (b *breaker) info() Info {
	in := b.eng.Info()
	c := in.Counts
	return Info{
		Dependency: b.name,
		State:      State(in.State),
		Counts: Counts{
			Requests: c.Requests, Successes: c.TotalSuccesses, Failures: c.TotalFailures, Exclusions: c.TotalExclusions,
			ConsecutiveSuccesses: c.ConsecutiveSuccesses, ConsecutiveFailures: c.ConsecutiveFailures,
		},
		Settings:  b.settings,
		OpenedAt:  in.OpenedAt,
		OpenUntil: in.OpenUntil,
		Remote:    in.Remote,
	}
}
