package framework

import "github.com/jetflow-io/jetflow/internal/topology"

// Dependencies are the external services a handler calls, named for their
// rate limits and circuit breakers (packages ratelimit and breaker). The
// rule is the topology's (topology.ValidateDependency): a name becomes a key
// of the breaker and limits buckets.

// ValidateDependency checks that dep can name a dependency (its circuit
// breaker and key in the breaker bucket, its rate limit): 1 to
// [MaxDependencyLen] bytes of A-Z a-z 0-9 _ - and dots between tokens, for
// example "payments-gw" or "smtp.eu". The error wraps
// [ErrInvalidDependency].
func ValidateDependency(dep string) error { return topology.ValidateDependency(dep) }
