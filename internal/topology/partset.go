package topology

import "github.com/jetflow-io/jetflow/streams"

// PartitionSet is the set of task partitions a worker serves: their names
// and task streams, in partition order, and the deployment's layout. It is
// immutable: a worker serving partitions added to the deployment builds a
// new one and swaps it in, so the per-task readers need no lock.
type PartitionSet struct {
	names   []streams.Names
	streams []string
	layout  streams.Layout
}

// NewPartitionSet returns the set of the first l.Partitions partitions of
// the deployment with base names base (at least one).
func NewPartitionSet(base streams.Names, l streams.Layout) *PartitionSet {
	s := &PartitionSet{names: base.Partitions(l.Partitions), layout: l}
	s.streams = make([]string, len(s.names))
	for k, p := range s.names {
		s.streams[k] = p.TaskStream()
	}
	return s
}

// Names returns the names of the partitions, in partition order. The
// slice is shared: do not modify it.
func (s *PartitionSet) Names() []streams.Names { return s.names }

// Streams returns the task streams of the partitions, in partition order.
// The slice is shared: do not modify it.
func (s *PartitionSet) Streams() []string { return s.streams }

// Layout returns the deployment's layout the set was built from.
func (s *PartitionSet) Layout() streams.Layout { return s.layout }

// StreamOf returns the task stream of a message stored on subject: its
// partition's, or the first partition's when subject names none or one
// beyond the set. It runs for every task, so it does not allocate.
func (s *PartitionSet) StreamOf(subject string) string {
	if len(s.streams) < 2 {
		return s.streams[0]
	}
	if k := s.names[0].SubjectPartition(subject); k < len(s.streams) {
		return s.streams[k]
	}
	return s.streams[0]
}

// PartitionCap returns partition k's share of a cap of total across count
// partitions: the shares add up to total, and none is below 1 (a cap
// smaller than the count gives 1 to each, so every partition's consumer
// can still deliver). A cap of 0 or less (none) stays as it is.
func PartitionCap(total, count, k int) int {
	if total <= 0 || count < 2 {
		return total
	}
	share := total / count
	if k < total%count {
		share++
	}
	return max(share, 1)
}
