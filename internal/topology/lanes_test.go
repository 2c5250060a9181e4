package topology_test

import (
	"testing"

	"github.com/jetflow-io/jetflow/internal/topology"
)

// ParseLane reads what EnsureLaneConsumer writes and refuses anything else.
func TestParseLane(t *testing.T) {
	t.Parallel()
	if l, n, ok := topology.ParseLane(map[string]string{topology.MetaLane: "3/16"}); !ok || l != 3 || n != 16 {
		t.Errorf("3/16: %d, %d, %v", l, n, ok)
	}
	for _, bad := range []string{"", "9/4", "-1/4", "4/4", "1/3", "1/512", "a/4", "1", "1/4/2"} {
		if _, _, ok := topology.ParseLane(map[string]string{topology.MetaLane: bad}); ok {
			t.Errorf("%q read as a lane", bad)
		}
	}
}
