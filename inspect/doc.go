// Package inspect answers an operator's questions about a jetflow topology
// from JetStream state alone, and carries out the operator's controls: the
// queries behind the jetflow command (cmd/jetflow), the dashboard (package
// ui) and metrics exporters.
//
//	o := inspect.New(client)
//	ov, err := o.Overview(ctx)                                   // every queue, stream and leader
//	waiting, err := o.ListTasks(ctx, inspect.TaskFilter{Type: "email.send"})
//	d, err := o.FindTask(ctx, "order-1042")                       // message, record, last error
//	_, err = o.PauseType(ctx, "email.send", time.Time{})          // cluster-wide kill switch
//
// # Queries
//
//   - Queues: [Operator.QueueStats] (the load of every queue),
//     [Operator.Overview] (counts, backlog age, pause state, stranded work
//     subjects, cluster leaders), [Operator.QueueActivity] (each consumer's
//     progress and oldest waiting task), [Operator.Stranded] (work subjects
//     no consumer reads).
//   - Workers: [Operator.Workers] (the worker registry: every running
//     worker, what it serves and its build; [Overview] counts them per
//     queue and flags a queue with waiting tasks and no live worker).
//   - Tasks: [Operator.ListTasks], [Operator.FindTask],
//     [Operator.ScheduledTasks] (delayed tasks, those due first).
//   - Features: [Operator.RateLimits], [Operator.UniqueReservations],
//     [Operator.OrderingPartitions], [Operator.BlockedTasks],
//     [Operator.BreakerRecords].
//
// # Controls
//
// [Operator.PauseQueue], [Operator.ResumeQueue], [Operator.PauseType] and
// [Operator.ResumeType] pause consumers cluster-wide; [Operator.ResolveBlocked]
// unblocks the key of an ordered task that failed for good.
//
// A task's state record and cancelling a delayed task stay on
// [framework.Inspector] ([framework.Inspector.GetTask],
// [framework.Inspector.CancelTask]): the client uses them. Dead letters are package
// [github.com/jetflow-io/jetflow/dlq]. Reads are bounded (each query states
// its limit) and leave no state on the server. See docs/operations.md.
package inspect
