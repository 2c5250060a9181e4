// Package ratelimit owns the engine behind the cluster-wide rate limits of
// the public package ratelimit (WithLimit, WithDependency, Throttle,
// inspect.Operator.RateLimits):
//
//   - a limit's parameters and their validation ([Limit], [Limit.Normalize]);
//   - the GCRA token bucket kept in one KV entry per limit ([Record]), its
//     keys ([KeyType], [KeyDep]) and the limits bucket ([EnsureBucket]);
//   - the per-process [Limiter], which reserves permits for its local
//     waiters in batches with compare-and-set, at most a short horizon
//     ahead, and hands them out at their due times; [Limiter.Throttle]
//     pushes every process's next permit back;
//   - the [Gate], which decides whether a task waits for its permit in place
//     or is set aside until it is due, keeping the permit for the rerun;
//   - reading the bucket back for inspection ([List]).
//
// The bucket and stream names come from the caller; the package imports
// neither streams nor framework.
package ratelimit
