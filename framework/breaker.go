package framework

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Sentinel errors of the circuit breakers.
var (
	// ErrBreakerOpen matches every *[BreakerOpenError]: a call refused (or
	// failed while its breaker opened) because the dependency's circuit
	// breaker is open or is already probing. A task whose handler returns it
	// is rerun in process after the open period, without spending an attempt.
	ErrBreakerOpen = errors.New("framework: circuit breaker open")
	// ErrNoBreakers is returned by [Call] and [CallValue] outside a handler
	// when ctx carries no registry (see [ContextWithBreakers]).
	ErrNoBreakers = errors.New("framework: no circuit breaker registry in context (call inside a handler or use ContextWithBreakers)")
	// ErrInvalidDependency reports a dependency name that is not 1 to 128
	// bytes of A-Z a-z 0-9 _ - and inner dots.
	ErrInvalidDependency = errors.New("framework: invalid dependency name")
)

// BreakerState is the state of a dependency's circuit breaker.
type BreakerState int

// Breaker states. The zero value is [BreakerClosed].
const (
	// BreakerClosed lets every call through and counts failures.
	BreakerClosed BreakerState = iota
	// BreakerHalfOpen lets a few probe calls through
	// ([BreakerSettings.HalfOpenMaxRequests]); their outcome closes or
	// reopens the breaker.
	BreakerHalfOpen
	// BreakerOpen refuses every call until the open timeout passes.
	BreakerOpen
)

// String returns "closed", "half-open" or "open".
func (s BreakerState) String() string {
	switch s {
	case BreakerClosed:
		return "closed"
	case BreakerHalfOpen:
		return "half-open"
	case BreakerOpen:
		return "open"
	default:
		return fmt.Sprintf("breaker-state(%d)", int(s))
	}
}

// MarshalText implements [encoding.TextMarshaler].
func (s BreakerState) MarshalText() ([]byte, error) {
	switch s {
	case BreakerClosed, BreakerHalfOpen, BreakerOpen:
		return []byte(s.String()), nil
	}
	return nil, fmt.Errorf("framework: invalid breaker state %d", int(s))
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (s *BreakerState) UnmarshalText(b []byte) error {
	switch string(b) {
	case "closed":
		*s = BreakerClosed
	case "half-open":
		*s = BreakerHalfOpen
	case "open":
		*s = BreakerOpen
	default:
		return fmt.Errorf("framework: invalid breaker state %q", b)
	}
	return nil
}

func stateOf(s gobreaker.State) BreakerState {
	switch s {
	case gobreaker.StateOpen:
		return BreakerOpen
	case gobreaker.StateHalfOpen:
		return BreakerHalfOpen
	default:
		return BreakerClosed
	}
}

// BreakerSettings configure the circuit breaker of one dependency. The zero
// value means the defaults.
type BreakerSettings struct {
	// ConsecutiveFailures trips the breaker after that many failures in a
	// row. Ignored when FailureRatio is set. Default 5.
	ConsecutiveFailures uint32
	// FailureRatio, in (0, 1], trips the breaker when at least that share of
	// the calls counted in the current Interval failed, once MinRequests
	// calls were counted. Default 0: use ConsecutiveFailures.
	FailureRatio float64
	// MinRequests is the number of calls counted before FailureRatio
	// applies. Default 10.
	MinRequests uint32
	// Interval is the window after which a closed breaker forgets its
	// counts. Default 1 minute.
	Interval time.Duration
	// OpenTimeout is how long the breaker stays open before it lets probes
	// through; the consumers of the task types that declared the
	// dependency are paused for as long. Default 30 s.
	OpenTimeout time.Duration
	// HalfOpenMaxRequests is how many probe calls a half-open breaker lets
	// through (per worker); that many successes in a row close it, any
	// failure reopens it. Default 1.
	HalfOpenMaxRequests uint32
	// IsFailure reports whether an error returned by a call counts as a
	// failure of the dependency. Errors it rejects count as successes: the
	// dependency answered. Default [IsDependencyFailure]. A cancellation of
	// the caller's context is never counted, whatever IsFailure says.
	IsFailure func(err error) bool
}

// Breaker defaults, used for [BreakerSettings] fields left at zero and for
// dependencies used without [WithBreaker].
const (
	DefaultBreakerConsecutiveFailures = 5
	DefaultBreakerMinRequests         = 10
	DefaultBreakerInterval            = time.Minute
	DefaultBreakerOpenTimeout         = 30 * time.Second
	DefaultBreakerHalfOpenMaxRequests = 1
)

// IsDependencyFailure is the default [BreakerSettings.IsFailure]: every
// non-nil error except a permanent one ([Permanent], for example a 4xx
// answer) and an [ErrBreakerOpen] of a nested call to another dependency.
func IsDependencyFailure(err error) bool {
	return err != nil && !IsPermanent(err) && !errors.Is(err, ErrBreakerOpen)
}

func (s BreakerSettings) withDefaults() BreakerSettings {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = DefaultBreakerConsecutiveFailures
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultBreakerMinRequests
	}
	if s.Interval <= 0 {
		s.Interval = DefaultBreakerInterval
	}
	if s.OpenTimeout <= 0 {
		s.OpenTimeout = DefaultBreakerOpenTimeout
	}
	if s.HalfOpenMaxRequests == 0 {
		s.HalfOpenMaxRequests = DefaultBreakerHalfOpenMaxRequests
	}
	if s.IsFailure == nil {
		s.IsFailure = IsDependencyFailure
	}
	return s
}

func (s BreakerSettings) validate() error {
	if s.FailureRatio < 0 || s.FailureRatio > 1 {
		return fmt.Errorf("%w: breaker failure ratio %v, want 0..1", ErrInvalidOption, s.FailureRatio)
	}
	if s.Interval < 0 || s.OpenTimeout < 0 {
		return fmt.Errorf("%w: breaker interval %v / open timeout %v, want ≥ 0", ErrInvalidOption, s.Interval, s.OpenTimeout)
	}
	if s.OpenTimeout > 0 && s.OpenTimeout < 10*time.Millisecond {
		return fmt.Errorf("%w: breaker open timeout %v, want ≥ 10ms", ErrInvalidOption, s.OpenTimeout)
	}
	return nil
}

// MaxDependencyLen is the longest accepted dependency name, in bytes.
const MaxDependencyLen = 128

// ValidateDependency checks that dep can name a circuit breaker (and its key
// in the breaker bucket): 1 to [MaxDependencyLen] bytes of A-Z a-z 0-9 _ -
// and dots between tokens, for example "payments-gw" or "smtp.eu". The
// error wraps [ErrInvalidDependency].
func ValidateDependency(dep string) error {
	if dep == "" || len(dep) > MaxDependencyLen {
		return fmt.Errorf("%w: %q must be 1 to %d bytes", ErrInvalidDependency, dep, MaxDependencyLen)
	}
	prevDot := true
	for i := 0; i < len(dep); i++ {
		c := dep[i]
		switch {
		case c == '.':
			if prevDot {
				return fmt.Errorf("%w: %q has an empty token at byte %d", ErrInvalidDependency, dep, i)
			}
			prevDot = true
			continue
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: %q contains %q at byte %d (allowed: A-Z a-z 0-9 _ - and . between tokens)", ErrInvalidDependency, dep, rune(c), i)
		}
		prevDot = false
	}
	if prevDot {
		return fmt.Errorf("%w: %q ends with a dot", ErrInvalidDependency, dep)
	}
	return nil
}

// WithBreaker declares the circuit breaker settings of dependency dep.
// Dependencies used without a declaration get the defaults. Workers and
// [NewBreakers] only.
func WithBreaker(dep string, s BreakerSettings) BreakerOption {
	return BreakerOption(func(o *options) error {
		if err := ValidateDependency(dep); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidOption, err)
		}
		if err := s.validate(); err != nil {
			return fmt.Errorf("breaker %s: %w", dep, err)
		}
		if o.breakers == nil {
			o.breakers = make(map[string]BreakerSettings)
		}
		o.breakers[dep] = s
		return nil
	})
}

// WithDependencies declares the dependencies the handler of a task type
// calls through [Call]. When the breaker of one of them opens in any worker,
// the consumers of this type (every priority) are paused cluster-wide until
// the breaker lets probes through again. Undeclared dependencies still
// get a breaker, but their open state does not pause any consumer.
func WithDependencies(deps ...string) HandlerOption {
	return func(c *handlerConfig) error {
		for _, d := range deps {
			if err := ValidateDependency(d); err != nil {
				return fmt.Errorf("%w: %w", ErrInvalidOption, err)
			}
			if !slices.Contains(c.dependencies, d) {
				c.dependencies = append(c.dependencies, d)
			}
		}
		return nil
	}
}

// BreakerOpenError is returned by [Call] when the dependency's breaker
// refused the call (open, or half-open with its probes already in flight),
// and when a failed call left the breaker open (it tripped it, or it was a
// failed probe). It matches [ErrBreakerOpen], and Err with [errors.Is].
type BreakerOpenError struct {
	// Dependency is the dependency's name.
	Dependency string
	// Until is when the breaker lets probe calls through again: a task is
	// rerun in process at about that time.
	Until time.Time
	// Err is gobreaker.ErrOpenState or gobreaker.ErrTooManyRequests for a
	// refused call, or the call's own error.
	Err error
}

// Error describes the failure; it implements the error interface.
func (e *BreakerOpenError) Error() string {
	return fmt.Sprintf("framework: circuit breaker of %s open until %s: %v",
		e.Dependency, e.Until.UTC().Format(time.RFC3339Nano), e.Err)
}

// Unwrap returns [ErrBreakerOpen] and Err.
func (e *BreakerOpenError) Unwrap() []error { return []error{ErrBreakerOpen, e.Err} }

// BreakerCounts are a breaker's counters since its last state change (and,
// while closed, within the current interval).
type BreakerCounts struct {
	Requests             uint32
	Successes            uint32
	Failures             uint32
	Exclusions           uint32
	ConsecutiveSuccesses uint32
	ConsecutiveFailures  uint32
}

// BreakerInfo describes one circuit breaker, as returned by
// [Breakers.States].
type BreakerInfo struct {
	// Dependency is the dependency's name.
	Dependency string
	// State is the breaker's current state.
	State BreakerState
	// Counts are the current counters.
	Counts BreakerCounts
	// OpenedAt is when the breaker last opened; zero if it never did.
	OpenedAt time.Time
	// OpenUntil is when an open breaker lets probes through; zero unless
	// State is [BreakerOpen].
	OpenUntil time.Time
	// Remote is true when the breaker is open because another worker
	// reported the dependency down, rather than because of local failures.
	Remote bool
	// Settings are the effective settings, defaults applied.
	Settings BreakerSettings
}

// breakerEvent is one state change.
type breakerEvent struct {
	dep      string
	from, to BreakerState
	at       time.Time
	until    time.Time // set when to == BreakerOpen
	remote   bool      // forced open by another worker's report
	failures uint32    // set when to == BreakerOpen: failures that opened it
}

// Breakers is a registry of circuit breakers, one per dependency name,
// created on first use. A worker has one ([Worker.Breakers]) that [Call]
// uses inside handlers; [NewBreakers] makes a standalone one for code that
// runs outside handlers. It is safe for concurrent use.
type Breakers struct {
	declared map[string]BreakerSettings
	hook     func(ctx context.Context, dep string, from, to BreakerState)
	log      *slog.Logger
	notify   func(ev breakerEvent) // set by a worker before it starts; nil otherwise

	mu sync.Mutex // serialises creation
	m  sync.Map   // dependency → *breaker
}

// NewBreakers returns a standalone registry. It honours [WithBreaker],
// [WithLogger] and the BreakerStateChanged field of [WithHooks]; other
// options are ignored. A standalone registry is local to the process: it
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

func (r *Breakers) deliver(ctx context.Context, ev breakerEvent) {
	lvl := slog.LevelInfo
	if ev.to == BreakerOpen {
		lvl = slog.LevelWarn
	}
	attrs := []slog.Attr{slog.String(LogKeyDependency, ev.dep), slog.String("from", ev.from.String()),
		slog.String("to", ev.to.String()), slog.Bool("remote", ev.remote)}
	if ev.to == BreakerOpen {
		attrs = append(attrs, slog.Time("until", ev.until), slog.Uint64("failures", uint64(ev.failures)))
	}
	r.log.LogAttrs(ctx, lvl, "jetflow circuit breaker state changed", attrs...)
	if r.notify != nil {
		r.notify(ev)
	}
	if r.hook != nil {
		callHook(r.log, nil, "BreakerStateChanged", func() { r.hook(ctx, ev.dep, ev.from, ev.to) })
	}
}

// LogKeyDependency is the log attribute key of a dependency name.
const LogKeyDependency = "dependency"

// Outcomes handed to gobreaker: the classification happens before, so
// gobreaker's own predicates only compare with these.
var (
	errOutcomeFailure  = errors.New("framework: breaker outcome failure")
	errOutcomeExcluded = errors.New("framework: breaker outcome excluded")
	errForcedOpen      = errors.New("framework: breaker forced open by a remote report")
)

type breaker struct {
	name     string
	settings BreakerSettings
	reg      *Breakers
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]

	openedAt  atomic.Int64  // unix nanos of the last open
	openUntil atomic.Int64  // unix nanos when the last open period ends
	remote    atomic.Bool   // the last open was forced by a remote report
	forcing   atomic.Bool   // forceOpen in progress
	tripFails atomic.Uint32 // failures counted when the breaker last tripped

	// State changes are recorded under gobreaker's lock and delivered
	// after it is released, by whichever caller finds them pending.
	evMu      sync.Mutex
	events    []breakerEvent
	nEvents   atomic.Int32
	deliverMu sync.Mutex
}

func (r *Breakers) newBreaker(dep string) *breaker {
	s, ok := r.declared[dep]
	if !ok {
		s = BreakerSettings{}
	}
	s = s.withDefaults()
	b := &breaker{name: dep, settings: s, reg: r}
	trip := func(c gobreaker.Counts) bool {
		trip := b.forcing.Load()
		if s.FailureRatio > 0 {
			trip = trip || c.Requests >= s.MinRequests && float64(c.TotalFailures) >= s.FailureRatio*float64(c.Requests)
		} else {
			trip = trip || c.ConsecutiveFailures >= s.ConsecutiveFailures
		}
		if trip {
			b.tripFails.Store(c.TotalFailures)
		}
		return trip
	}
	b.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:          dep,
		MaxRequests:   s.HalfOpenMaxRequests,
		Interval:      s.Interval,
		Timeout:       s.OpenTimeout,
		ReadyToTrip:   trip,
		OnStateChange: b.onStateChange,
		IsSuccessful:  func(err error) bool { return err == nil },
		IsExcluded:    func(err error) bool { return err == errOutcomeExcluded },
	})
	return b
}

// onStateChange runs under gobreaker's lock: record, do not call out.
func (b *breaker) onStateChange(_ string, from, to gobreaker.State) {
	now := time.Now()
	ev := breakerEvent{dep: b.name, from: stateOf(from), to: stateOf(to), at: now}
	if to == gobreaker.StateOpen {
		until := now.Add(b.settings.OpenTimeout)
		b.openedAt.Store(now.UnixNano())
		b.openUntil.Store(until.UnixNano())
		ev.until = until
		ev.remote = b.forcing.Load()
		b.remote.Store(ev.remote)
		ev.failures = 1 // a failed probe
		if from == gobreaker.StateClosed {
			ev.failures = b.tripFails.Load()
		}
	}
	b.evMu.Lock()
	b.events = append(b.events, ev)
	b.nEvents.Add(1)
	b.evMu.Unlock()
}

// flush delivers pending state changes, in order, outside gobreaker's lock.
// A hook that queries the breaker again does not deadlock: the nested flush
// returns at once and the outer loop delivers what it produced.
func (b *breaker) flush(ctx context.Context) {
	for b.nEvents.Load() > 0 {
		if !b.deliverMu.TryLock() {
			return
		}
		b.evMu.Lock()
		evs := b.events
		b.events = nil
		b.nEvents.Store(0)
		b.evMu.Unlock()
		for _, ev := range evs {
			b.reg.deliver(ctx, ev)
		}
		b.deliverMu.Unlock()
	}
}

func (b *breaker) call(ctx context.Context, fn func(ctx context.Context) error) error {
	done, err := b.cb.Allow()
	if b.nEvents.Load() > 0 {
		b.flush(ctx)
	}
	if err != nil {
		return b.refused(err)
	}
	completed := false
	defer func() {
		if !completed { // fn panicked: count it, let the panic go on
			done(errOutcomeFailure)
			b.flush(ctx)
		}
	}()
	err = fn(ctx)
	completed = true
	outcome := b.classify(ctx, err)
	done(outcome)
	if b.nEvents.Load() > 0 {
		b.flush(ctx)
	}
	if outcome == errOutcomeFailure {
		// The breaker is open now (this call tripped it, was a failed probe,
		// or failed while another call tripped it): treat the task like one
		// refused by the open breaker, so that no attempt is spent on it.
		if until := time.Unix(0, b.openUntil.Load()); time.Now().Before(until) {
			return &BreakerOpenError{Dependency: b.name, Until: until, Err: err}
		}
	}
	return err
}

func (b *breaker) classify(ctx context.Context, err error) error {
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil && errors.Is(err, context.Canceled), errors.Is(err, ErrBreakerOpen):
		return errOutcomeExcluded
	case b.settings.IsFailure(err):
		return errOutcomeFailure
	default:
		return nil
	}
}

// probeWait is how long a call refused by a half-open breaker (its probes
// are in flight) waits before it asks again.
func (b *breaker) probeWait() time.Duration {
	return min(max(b.settings.OpenTimeout/4, 50*time.Millisecond), 2*time.Second)
}

func (b *breaker) refused(err error) error {
	now := time.Now()
	until := time.Unix(0, b.openUntil.Load())
	if errors.Is(err, gobreaker.ErrTooManyRequests) || !until.After(now) {
		until = now.Add(b.probeWait())
	}
	return &BreakerOpenError{Dependency: b.name, Until: until, Err: err}
}

// forceOpen opens a closed or half-open breaker because another worker
// reported the dependency down. It reports whether the breaker opened.
func (b *breaker) forceOpen() bool {
	defer b.flush(context.Background())
	if b.cb.State() == gobreaker.StateOpen {
		return false
	}
	b.forcing.Store(true)
	defer b.forcing.Store(false)
	done, err := b.cb.Allow()
	if err != nil {
		return false // half-open with its probes in flight: they decide
	}
	done(errForcedOpen)
	return b.cb.State() == gobreaker.StateOpen
}

func (b *breaker) info() BreakerInfo {
	st := stateOf(b.cb.State())
	c := b.cb.Counts()
	b.flush(context.Background())
	in := BreakerInfo{
		Dependency: b.name,
		State:      st,
		Counts: BreakerCounts{
			Requests: c.Requests, Successes: c.TotalSuccesses, Failures: c.TotalFailures, Exclusions: c.TotalExclusions,
			ConsecutiveSuccesses: c.ConsecutiveSuccesses, ConsecutiveFailures: c.ConsecutiveFailures,
		},
		Settings: b.settings,
	}
	if ns := b.openedAt.Load(); ns != 0 {
		in.OpenedAt = time.Unix(0, ns)
	}
	if st == BreakerOpen {
		in.OpenUntil = time.Unix(0, b.openUntil.Load())
		in.Remote = b.remote.Load()
	}
	return in
}

type breakersKey struct{}

// ContextWithBreakers returns a copy of ctx in which [Call] and [CallValue]
// use r. Inside a handler they use the worker's registry without it.
func ContextWithBreakers(ctx context.Context, r *Breakers) context.Context {
	return context.WithValue(ctx, breakersKey{}, r)
}

func breakersFrom(ctx context.Context) *Breakers {
	if r, ok := ctx.Value(breakersKey{}).(*Breakers); ok && r != nil {
		return r
	}
	if w := WorkerFromContext(ctx); w != nil && w.breakers != nil {
		return w.breakers.reg
	}
	return nil
}

// Call runs fn through the circuit breaker of dependency dep: the breaker
// of the worker running the handler of ctx, or the registry set with
// [ContextWithBreakers]. It returns fn's error, or a *[BreakerOpenError]
// (matching [ErrBreakerOpen]) without calling fn when the breaker is open
// or already probing, or wrapping fn's error when that failure left the
// breaker open. Returned from a handler, such an error reruns the task
// after the open period without spending an attempt.
//
// Which errors count as failures is [BreakerSettings.IsFailure]; by default
// every error except a permanent one. A panic in fn counts as a failure and
// is propagated.
func Call(ctx context.Context, dep string, fn func(ctx context.Context) error) error {
	r := breakersFrom(ctx)
	if r == nil {
		return ErrNoBreakers
	}
	return r.Call(ctx, dep, fn)
}

// CallValue is [Call] for a function that returns a value. On error it
// returns the zero T with the error.
func CallValue[T any](ctx context.Context, dep string, fn func(ctx context.Context) (T, error)) (T, error) {
	var v T
	err := Call(ctx, dep, func(ctx context.Context) error {
		var err error
		v, err = fn(ctx)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return v, nil
}
