// Package delays owns the mover: the worker-side step that turns a delayed
// task a producer published to the delay stream into its one-shot schedule
// in the schedule stream.
//
// Producers may not write the schedule stream: a stream with message
// schedules must allow Nats-Rollup, so one "Nats-Rollup: all" there would
// delete every pending delayed task and cron schedule. The delay stream
// refuses rollups. A mover validates each delayed task read from it (ID,
// due time, target: all untrusted), builds the schedule from the validated
// parts, stores it, checks that the delayed task was not cancelled
// meanwhile, and acknowledges it (decision 025). A delayed task that can
// never become a schedule is dead-lettered with reason "invalid".
//
// The package also finds and cancels a pending delayed task by its ID in
// either place ([Topology.Read], [Topology.Cancel]), in the order that
// keeps a task moving between the two from being missed.
package delays
