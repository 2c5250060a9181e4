package fleet_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/internal/fleet"
)

func TestAcceptList(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		versions []int
		want     []int
		err      string
	}{
		{"sorted without repeats", []int{3, 1, 3, 2}, []int{1, 2, 3}, ""},
		{"none", nil, nil, "takes 1 to 64 versions, got 0"},
		{"too many", make([]int, fleet.MaxVersions+1), nil, "got 65"},
		{"zero", []int{1, 0}, nil, "payload version 0, want 1 to 65535"},
		{"too high", []int{fleet.MaxPayloadVersion + 1}, nil, "payload version 65536"},
	}
	for _, tc := range tests {
		got, err := fleet.AcceptList(tc.versions)
		if tc.err == "" && (err != nil || !slices.Equal(got, tc.want)) || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: AcceptList = %v, %v; want %v, %q", tc.name, got, err, tc.want, tc.err)
		}
	}
	in := []int{2, 1}
	if _, err := fleet.AcceptList(in); err != nil || in[0] != 2 {
		t.Errorf("AcceptList changed its input: %v, %v", in, err)
	}
}

func TestUpTo(t *testing.T) {
	t.Parallel()
	if got := fleet.UpTo(3); !slices.Equal(got, []int{1, 2, 3}) {
		t.Errorf("UpTo(3) = %v", got)
	}
	if fleet.CheckVersion(1) != nil || fleet.CheckVersion(fleet.MaxPayloadVersion) != nil || fleet.CheckVersion(-1) == nil {
		t.Error("CheckVersion wrong")
	}
}

func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		v  int
		ok bool
	}{{-1, false}, {0, false}, {1, true}, {fleet.MaxPayloadVersion, true}, {fleet.MaxPayloadVersion + 1, false}} {
		if err := fleet.CheckVersion(tc.v); (err == nil) != tc.ok {
			t.Errorf("CheckVersion(%d) = %v, want ok %v", tc.v, err, tc.ok)
		}
	}
}
