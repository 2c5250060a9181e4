// Package dispatch owns how a worker shares its slots among fetched tasks:
// a [Scheduler] holds the waiting items per priority rank, grants a free
// slot to the highest-ranked waiting item whose [Class] (task type) has
// room too — always the highest rank (strict), or a rank drawn in
// proportion to its weight (weighted, so that no rank starves) — and keeps
// the set of items holding a slot, which the worker's heartbeat sweeper
// and shutdown walk. An item holding a slot may pass it on to one that was
// never queued ([Scheduler.Swap]) only while no waiting item could use it.
//
// The scheduler knows nothing of messages or handlers: it calls the
// worker's grant function, under its lock, for each item it starts. The
// worker's fetching and heartbeats live in internal/intake, its execution
// in internal/attempt.
package dispatch
