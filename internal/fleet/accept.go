package fleet

import (
	"fmt"
	"slices"
)

// CheckVersion returns an error when v is not a payload version, from 1 to
// [MaxPayloadVersion].
func CheckVersion(v int) error {
	if v < 1 || v > MaxPayloadVersion {
		return fmt.Errorf("payload version %d, want 1 to %d", v, MaxPayloadVersion)
	}
	return nil
}

// AcceptList returns the versions a handler declares it accepts, sorted and
// without repeats, or an error when there are none, more than
// [MaxVersions], or one is not a version ([CheckVersion]).
func AcceptList(versions []int) ([]int, error) {
	if len(versions) == 0 || len(versions) > MaxVersions {
		return nil, fmt.Errorf("AcceptVersions takes 1 to %d versions, got %d", MaxVersions, len(versions))
	}
	for _, v := range versions {
		if err := CheckVersion(v); err != nil {
			return nil, err
		}
	}
	vs := slices.Clone(versions)
	slices.Sort(vs)
	return slices.Compact(vs), nil
}

// UpTo returns the versions 1 to v, those a payload of version v accepts
// by default (a struct grown by fields decodes what its earlier versions
// wrote).
func UpTo(v int) []int {
	out := make([]int, v)
	for i := range out {
		out[i] = i + 1
	}
	return out
}
