package streamdefs

import "hash/fnv"

// PartitionOf returns the partition of count that key hashes to (FNV-1a):
// the same key always lands in the same partition of a given count. A
// count below 2 gives 0.
func PartitionOf(key string, count int) int {
	if count < 2 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(count))
}
