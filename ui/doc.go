// Package ui is jetflow's web dashboard, an [http.Handler] to mount in your
// own server (as asynqmon is for asynq) or to run with `jetflow ui`.
//
// # Pages
//
//   - Overview: waiting, in-flight, scheduled and dead tasks, paused queues
//     and the oldest waiting task, with live charts of throughput
//     (deliveries per second) and backlog per queue.
//   - Queues: every task type × priority, with pause and resume buttons
//     (the consumer is paused cluster-wide: the operator's kill switch) and
//     the list of paused queues.
//   - Scheduled: delayed tasks by due time, with cancel.
//   - Dead letters: filter by type, reason and error text; replay one
//     record, replay or purge every matching record (after a confirmation);
//     a record's payload and headers.
//   - Cron: repeating schedules with their next fire time.
//   - Breakers: the latest state every dependency's circuit breaker
//     reported.
//   - Ordering, limits, uniqueness: blocked ordering keys (retry or skip
//     them unless read-only), partitions of ordered types with their head
//     task, rate limits against their use, uniqueness reservations.
//   - Workflows: runs with their status; a run's steps drawn as a graph,
//     each coloured by its state.
//   - Task: a task's state record by ID.
//
// The pages are plain HTML, CSS and JavaScript embedded in the binary: no
// build step, no external requests. They poll a JSON API under "api/"
// every [Options.RefreshInterval].
//
// # Mounting and security
//
// New returns a handler rooted at "/"; mount it under a path with
// [http.StripPrefix]:
//
//	h, err := ui.New(nc, ui.Options{ReadOnly: true})
//	mux.Handle("/jetflow/", http.StripPrefix("/jetflow", requireAdmin(h)))
//
// The dashboard does no authentication: wrap it in yours. Mutations
// (replay, purge, cancel, pause, resume) are POST requests that must carry
// the [RequestHeader] header, which a cross-site form cannot send, and
// [Options.ReadOnly] refuses them all.
//
// # Metrics
//
// GET "metrics" answers queue gauges in the Prometheus text format, read
// from JetStream at each scrape, so any process can serve them: waiting,
// scheduled, pending acks, redelivered, oldest waiting age, paused,
// pull requests waiting and deliveries per queue (labels type and
// priority), dead letters per type, scheduled tasks, cron schedules and the
// breaker state per dependency. The names are the Metric constants. Worker
// counters (tasks started, succeeded, failed, durations) come from the
// contrib/prometheus module's hooks instead.
package ui
