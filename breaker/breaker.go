package breaker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/ratelimit"
)

// Sentinel errors of the circuit breakers.
var (
	// ErrOpen matches every *[OpenError]: a call refused (or failed while
	// its breaker opened) because the dependency's circuit breaker is open
	// or is already probing. A task whose handler returns it is rerun in
	// process after the open period, without spending an attempt.
	ErrOpen = errors.New("breaker: circuit breaker open")
	// ErrNoRegistry is returned by [Call] and [CallValue] when ctx carries
	// no registry: outside a handler without [ContextWithRegistry], or in a
	// handler of a worker that breakers were not installed on ([Install]).
	ErrNoRegistry = errors.New("breaker: no circuit breaker registry in context (install breakers on the worker with breaker.Install, or use ContextWithRegistry)")
)

// Settings configure the circuit breaker of one dependency. The zero
// value means the defaults.
type Settings struct {
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

// Defaults, used for [Settings] fields left at zero and for dependencies
// used without [WithSettings].
const (
	DefaultConsecutiveFailures = 5
	DefaultMinRequests         = 10
	DefaultInterval            = time.Minute
	DefaultOpenTimeout         = 30 * time.Second
	DefaultHalfOpenMaxRequests = 1
)

// IsDependencyFailure is the default [Settings.IsFailure]: every
// non-nil error except a permanent one ([framework.Permanent], for
// example a 4xx answer) and an [ErrOpen] of a nested call to another
// dependency.
func IsDependencyFailure(err error) bool {
	return err != nil && !framework.IsPermanent(err) && !errors.Is(err, ErrOpen)
}

func (s Settings) withDefaults() Settings {
	if s.ConsecutiveFailures == 0 {
		s.ConsecutiveFailures = DefaultConsecutiveFailures
	}
	if s.MinRequests == 0 {
		s.MinRequests = DefaultMinRequests
	}
	if s.Interval <= 0 {
		s.Interval = DefaultInterval
	}
	if s.OpenTimeout <= 0 {
		s.OpenTimeout = DefaultOpenTimeout
	}
	if s.HalfOpenMaxRequests == 0 {
		s.HalfOpenMaxRequests = DefaultHalfOpenMaxRequests
	}
	if s.IsFailure == nil {
		s.IsFailure = IsDependencyFailure
	}
	return s
}

func (s Settings) validate() error {
	if s.FailureRatio < 0 || s.FailureRatio > 1 {
		return fmt.Errorf("%w: breaker failure ratio %v, want 0..1", framework.ErrInvalidOption, s.FailureRatio)
	}
	if s.Interval < 0 || s.OpenTimeout < 0 {
		return fmt.Errorf("%w: breaker interval %v / open timeout %v, want ≥ 0", framework.ErrInvalidOption, s.Interval, s.OpenTimeout)
	}
	if s.OpenTimeout > 0 && s.OpenTimeout < 10*time.Millisecond {
		return fmt.Errorf("%w: breaker open timeout %v, want ≥ 10ms", framework.ErrInvalidOption, s.OpenTimeout)
	}
	return nil
}

// WithDependencies declares the dependencies the handler of a task type
// calls through [Call]. When the breaker of one of them opens in any worker,
// the consumers of this type (every priority) are paused cluster-wide until
// the breaker lets probes through again. Undeclared dependencies still
// get a breaker, but their open state does not pause any consumer. It
// needs breakers installed on the worker ([Install]): without them the
// worker's Start fails with [framework.ErrInvalidOption]. An invalid name
// makes [framework.Worker.Register] panic.
func WithDependencies(deps ...string) framework.HandlerOption {
	for _, d := range deps {
		if err := topology.ValidateDependency(d); err != nil {
			return framework.InvalidHandlerOption(err)
		}
	}
	return framework.WithHandlerValue(depsKey{}, slices.Clone(deps))
}

// depsKey is the key of WithDependencies' handler values.
type depsKey struct{}

// String names the option in the error of a worker without [Install].
func (depsKey) String() string { return "breaker.WithDependencies needs breaker.Install" }

// OpenError is returned by [Call] when the dependency's breaker
// refused the call (open, or half-open with its probes already in flight),
// and when a failed call left the breaker open (it tripped it, or it was a
// failed probe). It matches [ErrOpen], and Err with [errors.Is].
type OpenError struct {
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
func (e *OpenError) Error() string {
	return fmt.Sprintf("breaker: circuit breaker of %s open until %s: %v",
		e.Dependency, e.Until.UTC().Format(time.RFC3339Nano), e.Err)
}

// Unwrap returns [ErrOpen] and Err.
func (e *OpenError) Unwrap() []error { return []error{ErrOpen, e.Err} }

// Counts are a breaker's counters since its last state change (and,
// while closed, within the current interval).
type Counts struct {
	// Requests is the number of calls let through.
	Requests uint32
	// Successes and Failures count the calls by their outcome
	// ([Settings.IsFailure]); Exclusions the calls that counted as neither
	// (cancelled with their context, refused by another breaker).
	Successes  uint32
	Failures   uint32
	Exclusions uint32
	// ConsecutiveSuccesses and ConsecutiveFailures are the current runs.
	ConsecutiveSuccesses uint32
	ConsecutiveFailures  uint32
}

// Info describes one circuit breaker, as returned by [Registry.States].
type Info struct {
	// Dependency is the dependency's name.
	Dependency string
	// State is the breaker's current state.
	State State
	// Counts are the current counters.
	Counts Counts
	// OpenedAt is when the breaker last opened; zero if it never did.
	OpenedAt time.Time
	// OpenUntil is when an open breaker lets probes through; zero unless
	// State is [StateOpen].
	OpenUntil time.Time
	// Remote is true when the breaker is open because another worker
	// reported the dependency down, rather than because of local failures.
	Remote bool
	// Settings are the effective settings, defaults applied.
	Settings Settings
}

type registryKey struct{}

// ContextWithRegistry returns a copy of ctx in which [Call] and [CallValue]
// use r. Inside a handler they use the worker's registry ([Install])
// without it.
func ContextWithRegistry(ctx context.Context, r *Registry) context.Context {
	return context.WithValue(ctx, registryKey{}, r)
}

func registryFrom(ctx context.Context) *Registry {
	if r, ok := ctx.Value(registryKey{}).(*Registry); ok && r != nil {
		return r
	}
	return Of(framework.TaskFromContext(ctx).Worker())
}

// Call runs fn through the circuit breaker of dependency dep: the breaker
// of the worker running the handler of ctx ([Install]), or the registry set
// with [ContextWithRegistry]. It returns fn's error, or a *[OpenError]
// (matching [ErrOpen]) without calling fn when the breaker is open
// or already probing, or wrapping fn's error when that failure left the
// breaker open. Returned from a handler, such an error reruns the task
// after the open period without spending an attempt.
//
// With a rate limit on dep (package ratelimit's WithDependency) Call first waits
// for a permit, returning ctx's error if it ends first.
//
// Which errors count as failures is [Settings.IsFailure]; by default
// every error except a permanent one. A panic in fn counts as a failure and
// is propagated.
func Call(ctx context.Context, dep string, fn func(ctx context.Context) error) error {
	r := registryFrom(ctx)
	if r == nil {
		return ErrNoRegistry
	}
	if err := ratelimit.Wait(ctx, dep); err != nil {
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
