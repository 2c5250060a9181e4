// Package ordering owns the engine behind framework's ordered tasks
// (Ordered, WithOrdering, inspect.Operator.OrderingPartitions, BlockedTasks,
// ResolveBlocked):
//
//   - ordering keys: their validation ([ValidateKey]) and the slot subject
//     a key hashes to ([Slot]);
//   - reading a partition's state back from its consumer and head message
//     ([Rules.Partition]);
//   - blocked keys: the record of a task that failed for good and keeps its
//     partition blocked ([Blocked]), the ordering bucket ([EnsureBucket]),
//     the per-type [Blocker] that decides before each attempt whether the
//     task runs, stays held or is skipped, and listing and resolving records
//     ([Rules.ListBlocked], [Rules.Resolve]).
//
// Names, metadata keys and the rules for task types and IDs come from the
// caller in [Rules]; the package imports neither streams nor framework.
package ordering
