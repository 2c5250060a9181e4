package topology

import (
	"testing"

	"github.com/jetflow-io/jetflow/streams"
)

// ReadsSlot accepts only the partition consumer that reads a slot subject
// under some partition count: the router checks an advisory's consumer name
// with it before asking that consumer anything.
func TestDeadLetterTopologyReadsSlot(t *testing.T) {
	topo := DeadLetterTopology(streams.MustNames(""))
	cases := []struct {
		subject, consumer string
		want              bool
	}{
		{"jetflow.ord.a.b.5", "a_b-ord4-1", true},
		{"jetflow.ord.a.b.5", "a_b-ord1-0", true},
		{"jetflow.ord.a.b.5", "a_b-ord256-5", true},
		{"jetflow.ord.a.b.5", "a_b-ord4-2", false},
		{"jetflow.ord.a.b.5", "a_b-ord3-2", false},
		{"jetflow.ord.a.b.5", "c-ord4-1", false},
		{"jetflow.ord.a.b.5", "a_b-normal", false},
		{"jetflow.ord.a.b.999", "a_b-ord1-0", false},
		{"jetflow.task.normal.a.b", "a_b-ord1-0", false},
		{"jetflow.ord.a.b.K.>", "a_b-ord1-0", true},
		{"jetflow.ord.a.b.K.1.0.>", "a_b-ord4-1", true},
		{"jetflow.ord.a.b.K.1.0.>", "a_b-lane4-1", true},
		{"jetflow.ord.a.b.K.1.0.>", "a_b-lane4-2", false},
		{"jetflow.ord.a.b.K.1.0.>", "a_b-ord2-1", false},
		{"jetflow.ord.a.b.K.1.1.1.1.1.1.1.1", "a_b-lane256-255", true},
		{"jetflow.ord.a.b.K.1.2.>", "a_b-ord4-1", false},
		{"jetflow.ord.a.b.K.1.0", "a_b-ord4-1", false},
	}
	for _, c := range cases {
		if got := topo.ReadsSlot(c.subject, c.consumer); got != c.want {
			t.Errorf("ReadsSlot(%s, %s) = %v, want %v", c.subject, c.consumer, got, c.want)
		}
	}
	if typ, ok := topo.Ordered("jetflow.ord.a.b.5"); !ok || typ != "a.b" {
		t.Errorf("Ordered = %q, %v", typ, ok)
	}
}
