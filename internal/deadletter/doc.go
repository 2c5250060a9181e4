// Package deadletter owns the dead-letter machinery below the public
// worker's dead-letter options (package framework) and the operators'
// package dlq (Queue, Record):
//
//   - the record format: the headers a record carries ([HeaderReason] and
//     the others), how a record is built from a task (its payload and custom
//     headers kept, the last error from the worker or the errors bucket, a
//     deduplication ID per task-stream sequence) and how error text is made
//     safe for a header ([Text]);
//   - the errors bucket, where workers note failed attempts
//     ([Core.RecordFailure]) so that a record written later still carries the
//     last error, and where a routed task is marked dead;
//   - a worker's start-up step ([Core.Prepare]: the streams exist, the
//     errors bucket is created) and its own write before it terminates a
//     task ([Core.WriteFromWorker]);
//   - the router ([Core.RunRouter]), which follows the max-deliveries
//     advisories captured in the advisory stream, and the reconciler
//     ([Core.RunReconciler], [Core.Reconcile]), which finds max-delivered
//     tasks whose advisory was lost, run together by [Core.Run]. Both
//     route a task the same way (record, mark dead, delete from the task
//     stream), idempotently;
//   - a worker's cores, one per task partition ([Cores], on [Partitions]),
//     the reason of the record it writes for a task ([ReasonOf]), and the
//     records of the delayed tasks its mover rejects ([Core.RejectDelayed]).
//
// Names of streams and subjects come in a [Topology], filled by framework
// and dlq from streams.Names.
package deadletter
