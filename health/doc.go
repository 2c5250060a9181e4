// Package health answers "is this worker alive, can it take work?" for
// readiness and liveness probes.
//
// [Check] reads a worker's own view of itself (its state, the start-up
// steps it waits for and the last poll of each fetch loop) and the connection, and
// asks the server whether each consumer exists. [ReadinessHandler] and
// [LivenessHandler] serve the [Report] as JSON, with 200 or 503, for
// Kubernetes probes:
//
//	mux.Handle("/livez", health.LivenessHandler(w))
//	mux.Handle("/readyz", health.ReadinessHandler(w))
//
// A worker is live unless only a restart can help (not running, connection
// closed for good, a fetch loop wedged for the stall limit); it is ready
// when it is also connected, every consumer exists, and every fetch loop
// polls or waits for a free slot. See docs/operations.md.
package health
