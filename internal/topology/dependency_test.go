package topology_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/internal/topology"
)

func TestValidateDependency(t *testing.T) {
	for _, ok := range []string{"payments-gw", "smtp.eu", "A_1", strings.Repeat("a", topology.MaxDependencyLen)} {
		if err := topology.ValidateDependency(ok); err != nil {
			t.Errorf("ValidateDependency(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", ".a", "a.", "a..b", "a b", "a*", "a>", strings.Repeat("a", topology.MaxDependencyLen+1)} {
		if err := topology.ValidateDependency(bad); !errors.Is(err, topology.ErrInvalidDependency) {
			t.Errorf("ValidateDependency(%q) = %v, want ErrInvalidDependency", bad, err)
		}
	}
}
