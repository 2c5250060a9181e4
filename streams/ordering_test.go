package streams_test

import (
	"errors"
	"testing"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// TestOrderedSubjects checks the slot layout: the slot's bits as tokens,
// read back from either layout, and one filter per partition that matches
// exactly the slots whose low bits are the partition.
func TestOrderedSubjects(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("")
	for slot := range 256 {
		for _, subject := range []string{n.OrderedSubject("a.b-c", slot), n.LegacyOrderedSubject("a.b-c", slot)} {
			typ, got, err := n.ParseOrderedSubject(subject)
			if err != nil || typ != "a.b-c" || got != slot {
				t.Fatalf("ParseOrderedSubject(%q) = %q, %d, %v; want a.b-c, %d", subject, typ, got, err, slot)
			}
		}
	}
	if got, want := n.OrderedSubject("orders", 6), "jetflow.ord.orders.K.0.1.1.0.0.0.0.0"; got != want {
		t.Errorf("OrderedSubject = %q, want %q", got, want)
	}
	for _, c := range []struct {
		partitions, p int
		want          string
	}{
		{1, 0, "jetflow.ord.orders.K.>"},
		{2, 1, "jetflow.ord.orders.K.1.>"},
		{16, 6, "jetflow.ord.orders.K.0.1.1.0.>"},
		{256, 255, "jetflow.ord.orders.K.1.1.1.1.1.1.1.1"},
	} {
		if got := n.OrderedFilter("orders", c.partitions, c.p); got != c.want {
			t.Errorf("OrderedFilter(%d, %d) = %q, want %q", c.partitions, c.p, got, c.want)
		}
	}
	// Every slot is read by exactly the partition its low bits name.
	for _, partitions := range []int{1, 2, 16, 256} {
		for slot := range 256 {
			subject := n.OrderedSubject("orders", slot)
			for p := range partitions {
				if got, want := streamdefs.SubjectMatches(n.OrderedFilter("orders", partitions, p), subject), slot%partitions == p; got != want {
					t.Fatalf("partition %d of %d matches slot %d: %v, want %v", p, partitions, slot, got, want)
				}
			}
		}
	}
	for _, bad := range []string{
		"jetflow.ord.orders.K.1.1.1.0.0.0.0",     // seven bits
		"jetflow.ord.orders.K.1.1.1.0.0.0.0.0.1", // nine
		"jetflow.ord.orders.K.1.1.1.0.0.0.0.2",   // not a bit
		"jetflow.ord.orders.K.1.1.1.0.0.0.0..",   // empty token
		"jetflow.ord.K.1.1.1.0.0.0.0.0",          // no type
		"jetflow.ord.Orders.K.1.1.1.0.0.0.0.0",   // invalid type
		"jetflow.ord.orders.256",                 // legacy slot out of range
		"jetflow.ord.orders.07",                  // legacy slot not canonical
		"jetflow.task.normal.orders",
	} {
		if _, _, err := n.ParseOrderedSubject(bad); !errors.Is(err, streams.ErrInvalidSubject) {
			t.Errorf("ParseOrderedSubject(%q): %v, want ErrInvalidSubject", bad, err)
		}
	}
}
