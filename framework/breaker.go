package framework

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetflow-io/jetflow/internal/circuit"
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
func (s BreakerState) String() string { return circuit.State(s).String() }

// MarshalText implements [encoding.TextMarshaler].
func (s BreakerState) MarshalText() ([]byte, error) {
	b, err := circuit.State(s).MarshalText()
	if err != nil {
		return nil, fmt.Errorf("framework: %w", err)
	}
	return b, nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (s *BreakerState) UnmarshalText(b []byte) error {
	if err := (*circuit.State)(s).UnmarshalText(b); err != nil {
		return fmt.Errorf("framework: %w", err)
	}
	return nil
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
// With a rate limit on dep ([WithDependencyRateLimit]) Call first waits
// for a permit, returning ctx's error if it ends first.
//
// Which errors count as failures is [BreakerSettings.IsFailure]; by default
// every error except a permanent one. A panic in fn counts as a failure and
// is propagated.
func Call(ctx context.Context, dep string, fn func(ctx context.Context) error) error {
	r := breakersFrom(ctx)
	if r == nil {
		return ErrNoBreakers
	}
	if err := waitDependency(ctx, dep); err != nil { // WithDependencyRateLimit
		return err
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
