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
package effects
