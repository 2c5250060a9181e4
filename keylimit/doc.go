// Package keylimit caps how many tasks of one key run at once across every
// worker of the cluster: at most N running per customer, per account, per
// tenant, with limits that change at run time.
//
// A producer gives a task its key with [framework.WithKey]; a handler
// declares the limit per key with [PerKey]; [Install] puts the limits on
// the worker:
//
//	keylimit.Install(w)
//	framework.HandleArgs(w, syncAccount, keylimit.PerKey(2))
//
//	client.EnqueueArgs(ctx, SyncAccount{ID: "acme"}, framework.WithKey("acme"))
//
// A task whose key has all its slots taken waits without spending an
// attempt: it is set aside (its worker slot serves other tasks, heartbeats
// keep it alive, no goroutine waits for it) and tries again after a short,
// growing wait (5 ms to 250 ms). [Set] and [Remove] change a key's limit,
// or a whole type's, at run time: every worker applies the change within a
// moment, without a restart (`jetflow keylimits set TYPE N --key KEY`).
// [List] shows the overrides and the tasks running per key.
//
// An ordered type in lanes (framework.Ordering{Lanes, PerKey}) caps its
// keys in memory, without the slots below; [LaneLimit] gives its lanes the
// same overrides.
//
// How the limit holds: each key has N slots, KV records with a
// per-message TTL of the type's ack wait that a running task takes (stored
// only where none is, the server checks) and gives back when it returns.
// A worker that dies holding a slot gives it back when the TTL passes,
// within the ack wait, as its task is redelivered. See docs/flowcontrol.md.
package keylimit
