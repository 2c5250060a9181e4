// Package taskstate is the machinery behind framework's task-state calls
// (Client.Wait, Inspector.GetTask and Inspector.CancelTask) on plain
// values: a task's state record ([staterec.Record]) read from the state
// bucket, or else made from its pending schedule ([Tasks.Get]); the wait
// for its final record ([Tasks.Wait], with errors that say why none was
// seen: a missing permission, a closed connection, a task that writes no
// record); and the cancellation of a delayed task ([Tasks.Cancel]: its
// schedule purged, its "cancelled" record written).
//
// framework converts the records to its public TaskRecord and the final
// state of an awaited task to its TaskFailedError. The errors are worded
// for framework's callers, which return them as they are; they match
// [ErrNotFound], [ErrNotCancellable] and natserr.ErrNotConnected, which
// framework re-exports.
package taskstate
