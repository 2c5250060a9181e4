// Package intake is the worker's start of the pipeline, before the
// per-consumer fetch loop (internal/fetch): which consumers a worker pulls
// and getting them ready.
//
//   - [Plan] lists the (partition, type, priority) consumers a worker
//     serves in a partition layout, with their specs: a type is served in
//     the partitions that serve it (streams.Layout.ServedBy), and a cap the
//     user set is split over those partitions (topology.PartitionCap).
//   - [EnsureAll] runs the ensuring of those consumers, a bounded number at
//     once; the first error cancels the others and is returned.
//
// It imports neither framework nor the worker's types: the worker describes
// its registered types as [Type] values and carries the plan out.
package intake
