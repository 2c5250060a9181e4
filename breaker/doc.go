// Package breaker runs a worker's calls to external dependencies through
// circuit breakers, one per dependency name, and makes the workers of a
// cluster act on them together.
//
// [Install] plugs the breakers into a worker (a [framework.Plugin]):
//
//	w, _ := framework.NewWorker(nc)
//	_, err := breaker.Install(w, breaker.WithSettings("payments-gw", breaker.Settings{OpenTimeout: 10 * time.Second}))
//	w.HandleFunc("payments.charge", func(ctx context.Context, t *framework.Task) error {
//		return breaker.Call(ctx, "payments-gw", func(ctx context.Context) error { return gw.Charge(ctx, t.Payload) })
//	}, breaker.WithDependencies("payments-gw"))
//
// [Call] and [CallValue] return the call's error, or an [OpenError]
// without calling when the breaker is open. A handler that returns it is
// held in the worker and rerun once the breaker lets probes through,
// without spending an attempt. When a breaker opens, the consumers of the
// task types that declared its dependency ([WithDependencies]) are paused
// in every worker for the open period, and the change is written to the
// breaker bucket (read by package inspect, the CLI and the dashboard) and
// published as a [StateChange] to the Event field of the worker's
// [framework.Hooks]. [Of] returns a worker's [Registry]; [New] makes a
// standalone one for code outside handlers ([ContextWithRegistry]).
//
// A worker without Install has no breakers: Call in its handlers returns
// [ErrNoRegistry]. The engine (the breaker per dependency on
// sony/gobreaker, the cluster's bucket and pauses) is internal/circuit.
// See docs/breakers.md.
package breaker
