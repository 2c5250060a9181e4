package circuit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
)

// State is a breaker's state, numbered like breaker.State.
type State int

// The states.
const (
	Closed State = iota
	HalfOpen
	Open
)

func stateOf(s gobreaker.State) State {
	switch s {
	case gobreaker.StateOpen:
		return Open
	case gobreaker.StateHalfOpen:
		return HalfOpen
	default:
		return Closed
	}
}

// Settings shape a breaker; every field is set (the caller applies its
// defaults).
type Settings struct {
	// ConsecutiveFailures trips the breaker unless FailureRatio is set.
	ConsecutiveFailures uint32
	// FailureRatio trips it once MinRequests calls were counted in Interval.
	FailureRatio float64
	MinRequests  uint32
	Interval     time.Duration
	// OpenTimeout is how long it stays open; HalfOpenMaxRequests how many
	// probe calls it lets through then.
	OpenTimeout         time.Duration
	HalfOpenMaxRequests uint32
}

// Outcome is how a call counts.
type Outcome uint8

const (
	// Success counts as a success (also: an error that is not the
	// dependency's fault).
	Success Outcome = iota
	// Failure counts towards tripping the breaker.
	Failure
	// Excluded does not count at all (a cancelled call).
	Excluded
)

// Event is a state change.
type Event struct {
	From, To State
	At       time.Time
	// Until, Remote and Failures are set when To is Open: when it closes
	// to probes, whether another worker's report forced it, and the
	// failures that opened it.
	Until    time.Time
	Remote   bool
	Failures uint32
}

// OpenError is returned by [Breaker.Call] for a call the breaker refused,
// or whose failure left it open: the caller should retry at Until. Err is
// gobreaker's refusal or the call's own error.
type OpenError struct {
	Until time.Time
	Err   error
}

func (e *OpenError) Error() string { return "circuit open: " + e.Err.Error() }

// Info is a breaker's state and counts.
type Info struct {
	State     State
	Counts    gobreaker.Counts
	OpenedAt  time.Time // zero if it never opened
	OpenUntil time.Time // when State is Open
	Remote    bool      // when State is Open: forced by a remote report
}

// Outcomes handed to gobreaker: the classification happens before, so
// gobreaker's own predicates only compare with these.
var (
	errOutcomeFailure  = errors.New("circuit: outcome failure")
	errOutcomeExcluded = errors.New("circuit: outcome excluded")
	errForcedOpen      = errors.New("circuit: forced open by a remote report")
)

// Breaker is one circuit breaker. It is safe for concurrent use.
type Breaker struct {
	settings Settings
	classify func(ctx context.Context, err error) Outcome
	deliver  func(ctx context.Context, ev Event)
	cb       *gobreaker.TwoStepCircuitBreaker[struct{}]

	openedAt  atomic.Int64  // unix nanos of the last open
	openUntil atomic.Int64  // unix nanos when the last open period ends
	remote    atomic.Bool   // the last open was forced by a remote report
	forcing   atomic.Bool   // ForceOpen in progress
	tripFails atomic.Uint32 // failures counted when the breaker last tripped

	// State changes are recorded under gobreaker's lock and delivered
	// after it is released, by whichever caller finds them pending.
	evMu      sync.Mutex
	events    []Event
	nEvents   atomic.Int32
	deliverMu sync.Mutex
}

// New returns the breaker name with settings s. classify decides how a
// call's error counts; deliver receives each state change, in order,
// outside the breaker's lock, on the goroutine of a call that found it
// pending.
func New(name string, s Settings, classify func(ctx context.Context, err error) Outcome,
	deliver func(ctx context.Context, ev Event)) *Breaker {
	b := &Breaker{settings: s, classify: classify, deliver: deliver}
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
		Name:          name,
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
func (b *Breaker) onStateChange(_ string, from, to gobreaker.State) {
	now := time.Now()
	ev := Event{From: stateOf(from), To: stateOf(to), At: now}
	if to == gobreaker.StateOpen {
		until := now.Add(b.settings.OpenTimeout)
		b.openedAt.Store(now.UnixNano())
		b.openUntil.Store(until.UnixNano())
		ev.Until = until
		ev.Remote = b.forcing.Load()
		b.remote.Store(ev.Remote)
		ev.Failures = 1 // a failed probe
		if from == gobreaker.StateClosed {
			ev.Failures = b.tripFails.Load()
		}
	}
	b.evMu.Lock()
	b.events = append(b.events, ev)
	b.nEvents.Add(1)
	b.evMu.Unlock()
}

// flush delivers pending state changes, in order, outside gobreaker's lock.
// A callback that queries the breaker again does not deadlock: the nested
// flush returns at once and the outer loop delivers what it produced.
func (b *Breaker) flush(ctx context.Context) {
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
			b.deliver(ctx, ev)
		}
		b.deliverMu.Unlock()
	}
}

// Call runs fn through the breaker. It returns an *[OpenError] when the
// breaker refused the call or when fn's failure left it open; otherwise
// fn's error.
func (b *Breaker) Call(ctx context.Context, fn func(ctx context.Context) error) error {
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
	outcome := b.outcome(ctx, err)
	done(outcome)
	if b.nEvents.Load() > 0 {
		b.flush(ctx)
	}
	if outcome == errOutcomeFailure {
		// The breaker is open now (this call tripped it, was a failed probe,
		// or failed while another call tripped it): report it like a
		// refused call, so that the caller spends no attempt on it.
		if until := time.Unix(0, b.openUntil.Load()); time.Now().Before(until) {
			return &OpenError{Until: until, Err: err}
		}
	}
	return err
}

func (b *Breaker) outcome(ctx context.Context, err error) error {
	if err == nil {
		return nil
	}
	switch b.classify(ctx, err) {
	case Failure:
		return errOutcomeFailure
	case Excluded:
		return errOutcomeExcluded
	}
	return nil
}

// probeWait is how long a call refused by a half-open breaker (its probes
// are in flight) waits before it asks again.
func (b *Breaker) probeWait() time.Duration {
	return min(max(b.settings.OpenTimeout/4, 50*time.Millisecond), 2*time.Second)
}

func (b *Breaker) refused(err error) error {
	now := time.Now()
	until := time.Unix(0, b.openUntil.Load())
	if errors.Is(err, gobreaker.ErrTooManyRequests) || !until.After(now) {
		until = now.Add(b.probeWait())
	}
	return &OpenError{Until: until, Err: err}
}

// ForceOpen opens a closed or half-open breaker because another worker
// reported the dependency down. It reports whether the breaker opened.
func (b *Breaker) ForceOpen() bool {
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

// Info returns the breaker's state and counts, after delivering pending
// state changes.
func (b *Breaker) Info() Info {
	st := stateOf(b.cb.State())
	in := Info{State: st, Counts: b.cb.Counts()}
	b.flush(context.Background())
	if ns := b.openedAt.Load(); ns != 0 {
		in.OpenedAt = time.Unix(0, ns)
	}
	if st == Open {
		in.OpenUntil = time.Unix(0, b.openUntil.Load())
		in.Remote = b.remote.Load()
	}
	return in
}
