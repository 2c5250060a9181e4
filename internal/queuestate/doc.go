// Package queuestate owns how the inspector reads the state of the task
// stream's queues from the server, for dashboards and operators:
//
//   - the load of every queue: its consumer's counts, its delayed tasks,
//     and the stream-wide counts of schedules, junk and dead letters
//     ([Stats]);
//   - the activity of each queue's consumer, with the age of its oldest
//     waiting task ([Activities]);
//   - the one-shot schedules of delayed tasks, scanned with batched direct
//     gets ([ScanSchedules]);
//   - stranded subjects: work subjects holding tasks that no consumer's
//     filter matches ([Stranded]).
//
// Stream names, subjects and the parsing of jetflow's subjects come from the
// caller; the package imports neither streams nor framework.
package queuestate
