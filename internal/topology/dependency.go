package topology

import (
	"errors"
	"fmt"
)

// Dependencies are the external services a handler calls (package breaker's
// circuit breakers, package ratelimit's limits); their names become keys of
// the breaker and limits buckets.

// ErrInvalidDependency reports a dependency name that is not 1 to 128
// bytes of A-Z a-z 0-9 _ - and inner dots.
var ErrInvalidDependency = errors.New("streams: invalid dependency name")

// MaxDependencyLen is the longest accepted dependency name, in bytes.
const MaxDependencyLen = 128

// ValidateDependency checks that dep can name a dependency (its circuit
// breaker and key in the breaker bucket, its rate limit): 1 to
// [MaxDependencyLen] bytes of A-Z a-z 0-9 _ - and dots between tokens, for
// example "payments-gw" or "smtp.eu". The error wraps
// [ErrInvalidDependency].
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
