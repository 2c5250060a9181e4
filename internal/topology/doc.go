// Package topology holds the parts of jetflow's topology that only
// jetflow's own packages use, built on package streams' names: the
// per-type consumers workers create ([EnsureConsumer],
// [EnsureOrderedConsumer]) and their metadata keys, the topologies of the
// dead-letter and delay machinery ([DeadLetterTopology], [DelayTopology]),
// what a pending delayed task says of itself ([ParsePending]), the
// buckets' retention a worker sets at start ([EnsureRetention]), the move
// of workflow run documents ([MigrateRunDocuments], run by "jetflow upgrade
// --migrate-run-documents"), the partition a key hashes to
// ([PartitionOf]), the task partitions a worker serves ([PartitionSet]:
// the stream of a delivered message, a partition's share of a type's cap)
// and the rules of dependency names and ordered partition counts.
//
// It imports streams; streams does not import it. What streams.Ensure and
// the engine both need lives in internal/streamdefs, which streams
// imports.
package topology
