package topology_test

import (
	"strconv"
	"testing"

	"github.com/jetflow-io/jetflow/internal/topology"
)

// TestPartitionOf: a key always lands in the same partition, and keys
// spread over all of them.
func TestPartitionOf(t *testing.T) {
	t.Parallel()
	// A key always lands in the same partition; keys spread over all.
	seen := make(map[int]int)
	for i := range 3000 {
		k := topology.PartitionOf("key-"+strconv.Itoa(i), 3)
		if k != topology.PartitionOf("key-"+strconv.Itoa(i), 3) || k < 0 || k > 2 {
			t.Fatalf("PartitionOf: %d", k)
		}
		seen[k]++
	}
	for k := range 3 {
		if seen[k] < 800 {
			t.Errorf("partition %d got %d of 3000 keys", k, seen[k])
		}
	}
	if topology.PartitionOf("x", 1) != 0 || topology.PartitionOf("x", 0) != 0 {
		t.Error("PartitionOf of one partition is not 0")
	}
}
