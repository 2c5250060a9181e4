// Package taskmsg owns the wire format of a task: the headers jetflow sets
// on task messages, how a task message is built ([Build]) and sized
// ([Size]), how its payload is encoded ([Encode]) and decoded ([Decode]),
// and how a task's identity is read back from a stored message ([ID],
// [Fire]; on delivery with its due time, [DeliveredID] and [CheckDue]),
// whoever reads it: the worker for each delivery, the
// dead-letter router and reconciler for a task the server gave up on, the
// dead-letter operations for a replay.
//
// A task is one message on its work subject "<prefix>.task.<priority>.<type>"
// whose body is the encoded payload. Its ID travels in Nats-Msg-Id (which
// the server also uses to drop duplicates) or, on delayed and replayed
// tasks, in [HeaderTaskID] (the server strips Nats-Msg-Id when a schedule
// fires). A task fired by a repeating schedule carries neither: its ID is
// derived from the schedule's name and the tick ([CronID]). A task published
// without jetflow gets "seq-<stream sequence>" ([SeqID]).
//
// Only a task a schedule fired may carry an ID other than its Nats-Msg-Id,
// or a cron tick's ID ([IdentityProblem]): the server marks such tasks
// (Nats-Scheduler) and no producer can. Delayed tasks and dead-letter
// replays therefore reach the task stream through one-shot schedules.
//
// Subjects come from the caller (package streams owns the subject scheme),
// so this package depends on nothing of jetflow's but the cron parser.
package taskmsg
