// Package lanes holds, in memory and without I/O, what the owner of a lane
// decides about its deliveries (decision 049). A lane is one durable pull
// consumer, pinned to one worker at a time, that delivers the tasks of many
// keys with many acks pending; its owner runs each key's tasks in stream
// order, at most a few at once per key, while the other keys run meanwhile.
//
// # The gate
//
// A [Gate] receives the lane's deliveries ([Gate.Receive]) and hands back
// those that may start now; the caller runs them and reports each
// settlement ([Gate.Done]), which may let further tasks of the key start.
// Per key it keeps a queue sorted by stream sequence ([Item.Seq]), the
// tasks running, and the sequences handed back to the server that it
// awaits again ([Gate.Awaiting]). With [Config.Ordered] a key runs one task
// at a time, and a sequence handed back holds the key's later tasks until
// it is delivered again or forgotten ([Gate.Forget]); otherwise a key runs
// up to [Config.Limit] tasks at once, started in sequence order, and
// nothing waits for the sequences handed back.
//
// A key's tasks start in stream order, except redeliveries: a sequence
// delivered again starts as the key's head when it comes back, though
// higher sequences of the key may have started meanwhile. With Ordered the
// key's later tasks wait for a sequence handed back, so that happens only
// to a sequence that comes back unawaited: a duplicate delivery, one
// forgotten, or one that another owner of the lane handed back. The gate
// keeps no memory of settled sequences, so that a key with
// nothing queued, running or awaited costs nothing: a late redelivery of a
// sequence already settled (delivery is at least once) is queued as any
// other, goes before the key's higher queued sequences and, with Ordered,
// starts once nothing of the key runs.
//
// # Failover
//
// A gate starts out lost: it holds no delivery it receives until
// [Gate.Acquired] reports that the worker holds the lane's pin. It then
// queues what it receives and starts nothing until [Gate.Check], given the
// consumer's pending count and delivered sequence from one consumer-info
// reply, finds that every pending delivery is one it holds: deliveries
// still pending for a former owner would otherwise be overtaken when they
// come back. [Gate.Lost] (the pin went elsewhere) returns the queued
// deliveries for the caller to hand back and starts nothing more until the
// pin and a check come back; running tasks keep counting, against the
// per-key cap and in the check, until their Done.
//
// # Concurrency
//
// A Gate is safe for concurrent use; one mutex guards it. It never calls
// out except to [Config.Limit] and [Config.Now], under that mutex, and
// returns what may start instead of starting it: the caller hands those to
// its slots (internal/dispatch) in the order given.
package lanes
