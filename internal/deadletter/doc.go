// Package deadletter owns the dead-letter machinery below the public
// operations of package framework (DeadLetters, DeadLetter):
//
//   - the record format: the headers a record carries ([HeaderReason] and
//     the others), how a record is built from a task (its payload and custom
//     headers kept, the last error from the worker or the errors bucket, a
//     deduplication ID per task-stream sequence) and how error text is made
//     safe for a header ([Text]);
//   - the errors bucket, where workers note failed attempts
//     ([Core.RecordFailure]) so that a record written later still carries the
//     last error, and where a routed task is marked dead;
//   - the worker's own write before it terminates a task
//     ([Core.WriteFromWorker]);
//   - the router ([Core.RunRouter]), which follows the max-deliveries
//     advisories captured in the advisory stream, and the reconciler
//     ([Core.RunReconciler], [Core.Reconcile]), which finds max-delivered
//     tasks whose advisory was lost. Both route a task the same way
//     (record, mark dead, delete from the task stream), idempotently.
//
// Names of streams and subjects come in a [Topology], filled by framework
// from streams.Names.
package deadletter
