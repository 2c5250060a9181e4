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
// A schedule is stored only where none is pending (expected last subject
// sequence 0): one schedule per subject, so storing a second delayed task
// under the ID of a pending one would replace it. When the subject is
// taken, the mover reads what holds it. A schedule stored from the same
// delayed task ([HeaderOrigin]: an earlier delivery that could not
// acknowledge) makes this delivery done; anything else is a conflict: the
// pending schedule is kept, and the newcomer is dead-lettered with reason
// "conflict", logged and counted ([Mover].Conflicts). A schedule that fired
// or was cancelled leaves its subject free for a new task with its ID.
//
// The movers' durable consumer belongs to the deployment (streams.Ensure
// creates it): a mover looks it up and uses it as it finds it, warning
// when it differs from the wanted configuration ([ConsumerDrift]), and
// creates it only when it does not exist, so workers need no right to
// create or change it.
//
// The package also finds and cancels a pending delayed task by its ID in
// either place ([Topology.Read], [Topology.Cancel]), in the order that
// keeps a task moving between the two from being missed.
package delays
