package topology

import "github.com/jetflow-io/jetflow/internal/streamdefs"

// PartitionOf returns the partition of count that key hashes to (FNV-1a):
// the same key always lands in the same partition of a given count. A
// count below 2 gives 0.
func PartitionOf(key string, count int) int { return streamdefs.PartitionOf(key, count) }
