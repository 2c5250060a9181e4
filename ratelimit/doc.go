// Package ratelimit limits, across every worker of a cluster together, how
// often tasks of a type start and how often handlers call a dependency.
//
// [Install] plugs the limits into a worker (a [framework.Plugin]):
//
//	w, _ := framework.NewWorker(nc)
//	err := ratelimit.Install(w, ratelimit.WithDependency("payments-gw", ratelimit.Limit{Limit: 100}))
//	w.HandleFunc("emails.send", send, ratelimit.WithLimit(ratelimit.Limit{Limit: 20}))
//
// [WithKeyLimit] gives each task key of a type (framework.WithKey: a
// tenant, a customer) a limit of its own.
//
// A task of a type with a limit ([WithLimit]) waits for its permit before
// its handler runs, without spending an attempt: in place for a short wait,
// otherwise set aside (its slot serves other tasks, heartbeats keep it
// alive) until the permit is due. A call to a dependency with a limit
// ([WithDependency]) waits in [Wait], which package breaker's Call (and so
// handlers.DoHTTP) calls before the breaker, and which a handler without
// breakers calls itself before each call to the dependency; [Throttle] pushes every
// worker's next permit of a dependency back, for example after a 429.
//
// A [Limit] lets at most Limit + Burst permits be due in any window of one
// Interval (Limit + 1 with the default Burst), Limit per Interval over a
// long run.
//
// A worker without Install has no rate limits: a type registered with
// [WithLimit] fails the worker's Start, and Wait and Throttle return nil at once. Each limit is a GCRA token
// bucket in one entry of the limits bucket ([github.com/jetflow-io/jetflow/streams.Names.LimitsBucket]),
// updated with compare-and-set; each process reserves permits for its
// local waiters in batches, at most a short horizon ahead (the engine is
// internal/ratelimit). See docs/ratelimits.md.
package ratelimit
