package framework

import "github.com/jetflow-io/jetflow/internal/topology"

// Dependencies are the external services a handler calls, named for their
// rate limits and circuit breakers (packages ratelimit and breaker). The
// rule is the topology's (topology.ValidateDependency): a name becomes a key
// of the breaker and limits buckets.

// ErrInvalidDependency reports a dependency name that is not 1 to 128
// bytes of A-Z a-z 0-9 _ - and inner dots.
var ErrInvalidDependency = topology.ErrInvalidDependency

// LogKeyDependency is the log attribute key of a dependency name.
const LogKeyDependency = "dependency"

// MaxDependencyLen is the longest accepted dependency name, in bytes: 128.
const MaxDependencyLen = topology.MaxDependencyLen

// ValidateDependency checks that dep can name a dependency (its circuit
// breaker and key in the breaker bucket, its rate limit): 1 to
// [MaxDependencyLen] bytes of A-Z a-z 0-9 _ - and dots between tokens, for
// example "payments-gw" or "smtp.eu". The error wraps
// [ErrInvalidDependency].
func ValidateDependency(dep string) error { return topology.ValidateDependency(dep) }
