// Package effects runs a handler's side effects once per task: [Once] and
// [OnceValue] record, in the worker's effects bucket
// ([github.com/jetflow-io/jetflow/streams.Names.EffectsBucket],
// "JETFLOW_EFFECTS"), that an effect of a task was applied, so that a
// redelivered task skips it.
//
//	framework.Handle(w, "payments.charge", func(ctx context.Context, t *framework.Task, o Order) error {
//		chargeID, err := effects.OnceValue(ctx, "charge", func(ctx context.Context) (string, error) {
//			return gateway.Charge(ctx, framework.IdempotencyKey(ctx)+"/charge", o)
//		}, effects.WithPolicy(effects.Rerun)) // safe: the gateway deduplicates by key
//		if err != nil {
//			return err
//		}
//		return books.Record(ctx, o, chargeID) // may fail: the retry skips the charge
//	})
//
// See docs/effects.md for the exact guarantee.
//
// # The ledger
//
// A record moves through three states:
//
//	(none) --Create--> started --fn ok--> done
//	                     |  ^
//	                fn err  |  next attempt (Update with revision)
//	                     v  |
//	                    failed
//
// Create and Update are compare-and-set operations on the key's revision,
// so two deliveries of one task never both claim an effect. A record still
// "started" when a delivery looks at it means an earlier delivery claimed
// the effect and never recorded how it ended: it crashed or lost its
// connection between claiming and recording, or it is still running. Whether
// the effect happened is then unknown; the [Policy] decides.
//
// The bucket is the worker's ([framework.Worker.EffectsBucket]); its
// retention is set with [framework.WithEffectsTTL].
//
// # Keys and who may write them
//
// The record of effect "charge" of task "order-1042" of type
// "payments.charge" is the key "payments=2Echarge.order-1042.charge": the
// task type, the task ID and the effect key, each escaped like state keys
// (bytes other than A-Z a-z 0-9 _ - are written "=XX" in hex). The first
// token names the type alone, so a worker's user can be granted the ledger
// of its own types only, "$KV.JETFLOW_EFFECTS.payments=2Echarge.>" (package
// access does). Keys written before this scheme ("<id>.<key>") are not
// read: an effect claimed by a task in flight during the upgrade runs again
// on its next delivery, so drain the workers of types whose effects must
// not repeat before upgrading.
//
// # What trusting a task ID means
//
// The ledger trusts the ID of the task that runs: a delivery that carries a
// task's ID skips that task's applied effects and gets their recorded
// values. Workers accept an ID from a task only when the server
// deduplicated the task by it (Nats-Msg-Id) or a schedule fired it; a task
// claiming another ID, or a cron tick's ID, is dead-lettered without
// running. Within a task type, though, the ID is whatever its producer
// chose ([framework.WithID]): a producer allowed to enqueue the type can
// reuse an ID it knows or guesses, and its task then finds that ID's
// effects (after the stream's duplicate window, or first). Scoping by type
// keeps producers of other types out, except producers allowed to delay
// tasks, which may delay tasks of any type (docs/security.md); within a
// type, use IDs that other producers cannot guess.
package effects
