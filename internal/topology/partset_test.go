package topology_test

import (
	"testing"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

func names(t *testing.T) streams.Names {
	t.Helper()
	n, err := streams.NewNames("ps")
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestPartitionSet: a set lists its partitions' names and task streams in
// order, and keeps the layout it was built from.
func TestPartitionSet(t *testing.T) {
	t.Parallel()
	n := names(t)
	l := streams.Layout{Partitions: 3, Ordered: 2}
	s := topology.NewPartitionSet(n, l)
	if len(s.Names()) != 3 || s.Layout() != l {
		t.Fatalf("set of %d partitions, layout %+v", len(s.Names()), s.Layout())
	}
	for k, p := range s.Names() {
		if p.PartitionIndex() != k || s.Streams()[k] != n.Partition(k).TaskStream() {
			t.Errorf("partition %d: names of %d, stream %s", k, p.PartitionIndex(), s.Streams()[k])
		}
	}
	// A layout of no partitions (none read yet) is one.
	if s := topology.NewPartitionSet(n, streams.Layout{}); len(s.Names()) != 1 || s.Streams()[0] != n.TaskStream() {
		t.Fatalf("empty layout: %v", s.Streams())
	}
}

// TestPartitionSetStreamOf: a message's task stream is its partition's;
// a subject of a partition beyond the set, or of none, is the first's,
// and a set of one partition answers its stream whatever the subject.
func TestPartitionSetStreamOf(t *testing.T) {
	t.Parallel()
	n := names(t)
	s := topology.NewPartitionSet(n, streams.Layout{Partitions: 3, Ordered: 3})
	for k := range 3 {
		p := n.Partition(k)
		for _, subj := range []string{p.TaskSubject(streams.PriorityHigh, "email"), p.OrderedSubject("email", 2)} {
			if got, want := s.StreamOf(subj), p.TaskStream(); got != want {
				t.Errorf("StreamOf(%s) = %s, want %s", subj, got, want)
			}
		}
	}
	base := n.TaskStream()
	for _, subj := range []string{
		n.Partition(5).TaskSubject(streams.PriorityHigh, "email"), // added since the set was built
		"other.subject",
		"",
	} {
		if got := s.StreamOf(subj); got != base {
			t.Errorf("StreamOf(%q) = %s, want %s", subj, got, base)
		}
	}
	one := topology.NewPartitionSet(n, streams.Layout{Partitions: 1, Ordered: 1})
	if got := one.StreamOf(n.Partition(2).TaskSubject(streams.PriorityHigh, "email")); got != base {
		t.Errorf("one partition: StreamOf = %s, want %s", got, base)
	}
}

// TestPartitionSetStreamOfAllocs: StreamOf runs for every task and
// allocates nothing. Not parallel: AllocsPerRun counts the process's
// allocations.
func TestPartitionSetStreamOfAllocs(t *testing.T) {
	n := names(t)
	s := topology.NewPartitionSet(n, streams.Layout{Partitions: 3, Ordered: 3})
	subj := n.Partition(2).TaskSubject(streams.PriorityHigh, "email")
	if a := testing.AllocsPerRun(100, func() { _ = s.StreamOf(subj) }); a != 0 {
		t.Errorf("StreamOf allocates %v times", a)
	}
}

// TestPartitionCap: the shares of a cap add up to it when it is at least
// the count, none is below 1, and no cap, or one partition, keeps the cap.
func TestPartitionCap(t *testing.T) {
	t.Parallel()
	for _, count := range []int{2, 3, 4, 7} {
		for total := 1; total <= 50; total++ {
			sum := 0
			for k := range count {
				c := topology.PartitionCap(total, count, k)
				if c < 1 {
					t.Fatalf("PartitionCap(%d, %d, %d) = %d", total, count, k, c)
				}
				if lo := total / count; c != lo && c != lo+1 && c != 1 {
					t.Fatalf("PartitionCap(%d, %d, %d) = %d, not an even share", total, count, k, c)
				}
				sum += c
			}
			if want := max(total, count); sum != want {
				t.Errorf("shares of %d over %d add up to %d, want %d", total, count, sum, want)
			}
		}
	}
	for _, tt := range []struct{ total, count, k, want int }{
		{0, 3, 0, 0},   // no cap
		{-1, 3, 2, -1}, // no cap
		{10, 1, 0, 10}, // one partition
		{10, 0, 0, 10}, // no partition count
		{10, 3, 0, 4},  // the remainder goes to the first
		{10, 3, 2, 3},
		{2, 3, 2, 1}, // never below 1
	} {
		if got := topology.PartitionCap(tt.total, tt.count, tt.k); got != tt.want {
			t.Errorf("PartitionCap(%d, %d, %d) = %d, want %d", tt.total, tt.count, tt.k, got, tt.want)
		}
	}
}
