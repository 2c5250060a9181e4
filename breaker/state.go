package breaker

import (
	"fmt"

	"github.com/jetflow-io/jetflow/internal/circuit"
)

// State is the state of a dependency's circuit breaker.
type State int

// Breaker states. The zero value is [StateClosed].
const (
	// StateClosed lets every call through and counts failures.
	StateClosed State = iota
	// StateHalfOpen lets a few probe calls through
	// ([Settings].HalfOpenMaxRequests); their outcome closes or reopens the
	// breaker.
	StateHalfOpen
	// StateOpen refuses every call until the open timeout passes.
	StateOpen
)

// String returns "closed", "half-open" or "open".
func (s State) String() string { return circuit.State(s).String() }

// MarshalText implements [encoding.TextMarshaler].
func (s State) MarshalText() ([]byte, error) {
	b, err := circuit.State(s).MarshalText()
	if err != nil {
		return nil, fmt.Errorf("breaker: %w", err)
	}
	return b, nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (s *State) UnmarshalText(b []byte) error {
	if err := (*circuit.State)(s).UnmarshalText(b); err != nil {
		return fmt.Errorf("breaker: %w", err)
	}
	return nil
}

// StateChange is the event a worker's breakers publish
// ([framework.Worker.Emit]) when the circuit breaker of a dependency changes
// state: every hook set of the worker ([framework.WithHooks],
// [framework.Worker.AddHooks]) receives it in its Event field. It is
// published on the goroutine of the call that caused the change, with its
// context, after the breaker's lock was released.
//
//	framework.Hooks{Event: func(ctx context.Context, ev any) {
//		if c, ok := ev.(breaker.StateChange); ok {
//			log.Printf("breaker %s: %s -> %s", c.Dependency, c.From, c.To)
//		}
//	}}
type StateChange struct {
	// Dependency is the dependency's name.
	Dependency string
	// From is the state the breaker left; To the state it entered.
	From, To State
}
