package streams_test

import (
	"fmt"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
)

// TestTypePartitionMovesOnlyToAdded: spread by type, a type's partition
// changes, as partitions are added one by one, only to the partition just
// added (so running workers need consumers in added partitions alone), the
// types spread over every partition but the first, and Serves holds at
// every count a client may still use.
func TestTypePartitionMovesOnlyToAdded(t *testing.T) {
	const types = 2000
	for i := range types {
		taskType := fmt.Sprintf("type.%d", i)
		prev := streams.Layout{Partitions: 2, Ordered: 2, By: streams.PartitionByType}.TypePartition(taskType)
		if prev != 1 {
			t.Fatalf("%s in partition %d of 2, want 1", taskType, prev)
		}
		for c := 3; c <= streams.MaxPartitions; c++ {
			l := streams.Layout{Partitions: c, Ordered: 2, By: streams.PartitionByType}
			k := l.TypePartition(taskType)
			if k != prev && k != c-1 {
				t.Fatalf("%s moved from partition %d to %d when partition %d was added", taskType, prev, k, c-1)
			}
			if !l.Serves(k, taskType) || !l.Serves(prev, taskType) || !l.Serves(0, taskType) {
				t.Fatalf("%s: partitions %d, %d or 0 of %d do not serve it", taskType, prev, k, c)
			}
			prev = k
		}
	}
	l := streams.Layout{Partitions: 5, Ordered: 5, By: streams.PartitionByType}
	per := map[int]int{}
	for i := range types {
		taskType := fmt.Sprintf("type.%d", i)
		per[l.TypePartition(taskType)]++
		if got := l.ServedBy(taskType); len(got) != 2 || got[0] != 0 {
			t.Fatalf("%s served by %v, want 0 and its partition", taskType, got)
		}
	}
	for k := 1; k < 5; k++ {
		if per[k] < types/4*8/10 || per[k] > types/4*12/10 {
			t.Errorf("types per partition %v: partition %d is off a quarter by more than 20%%", per, k)
		}
	}
	if per[0] != 0 {
		t.Errorf("%d types in partition 0, want none", per[0])
	}
	byTask := streams.Layout{Partitions: 5, Ordered: 5}
	if byTask.TypePartition("x") != -1 || len(byTask.ServedBy("x")) != 5 {
		t.Error("a layout spread by task serves every type in every partition")
	}
}

// TestTaskPartition: spread by task, an ID always lands in one partition of
// a count, every partition gets some; spread by type, there is none.
func TestTaskPartition(t *testing.T) {
	l := streams.Layout{Partitions: 4}
	seen := map[int]bool{}
	for i := range 200 {
		id := fmt.Sprintf("task-%d", i)
		k := l.TaskPartition(id)
		if k < 0 || k >= 4 || k != l.TaskPartition(id) {
			t.Fatalf("TaskPartition(%q) = %d", id, k)
		}
		seen[k] = true
	}
	if len(seen) != 4 {
		t.Errorf("200 IDs reached partitions %v, want all 4", seen)
	}
	if k := (streams.Layout{Partitions: 1}).TaskPartition("x"); k != 0 {
		t.Errorf("one partition: %d", k)
	}
	if k := (streams.Layout{Partitions: 4, By: streams.PartitionByType}).TaskPartition("x"); k != -1 {
		t.Errorf("spread by type: %d, want -1", k)
	}
}
