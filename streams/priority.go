package streams

import "fmt"

// Priority orders tasks of the same worker: a worker starts a waiting task of a
// higher priority before any lower one. It is encoded in the work subject.
// The zero value is [PriorityNormal].
type Priority uint8

// The four priorities, from the zero value. [Priorities] lists them from
// highest to lowest.
const (
	PriorityNormal Priority = iota
	PriorityCritical
	PriorityHigh
	PriorityLow
)

// Priorities lists every priority from highest to lowest. Its length,
// len(Priorities), is a constant.
var Priorities = [...]Priority{PriorityCritical, PriorityHigh, PriorityNormal, PriorityLow}

// Rank returns 0 for the highest priority (critical) up to 3 for low.
func (p Priority) Rank() int {
	switch p {
	case PriorityCritical:
		return 0
	case PriorityHigh:
		return 1
	case PriorityNormal:
		return 2
	default:
		return 3
	}
}

// String returns the subject token of p: "critical", "high", "normal" or "low".
func (p Priority) String() string {
	switch p {
	case PriorityCritical:
		return "critical"
	case PriorityHigh:
		return "high"
	case PriorityNormal:
		return "normal"
	case PriorityLow:
		return "low"
	default:
		return fmt.Sprintf("priority(%d)", uint8(p))
	}
}

// Valid reports whether p is one of the four priorities.
func (p Priority) Valid() bool { return p <= PriorityLow }

// ParsePriority parses "critical", "high", "normal" or "low".
func ParsePriority(s string) (Priority, error) {
	switch s {
	case "critical":
		return PriorityCritical, nil
	case "high":
		return PriorityHigh, nil
	case "normal":
		return PriorityNormal, nil
	case "low":
		return PriorityLow, nil
	}
	return 0, fmt.Errorf("%w: %q (want critical, high, normal or low)", ErrInvalidPriority, s)
}

// MarshalText implements [encoding.TextMarshaler].
func (p Priority) MarshalText() ([]byte, error) {
	if !p.Valid() {
		return nil, fmt.Errorf("%w: %d", ErrInvalidPriority, uint8(p))
	}
	return []byte(p.String()), nil
}

// UnmarshalText implements [encoding.TextUnmarshaler].
func (p *Priority) UnmarshalText(b []byte) error {
	v, err := ParsePriority(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}
