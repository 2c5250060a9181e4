package effects

import (
	"regexp"
	"testing"
)

// kvKey is what the jetstream package accepts as a KV key.
var kvKey = regexp.MustCompile(`\A[-/_=\.a-zA-Z0-9]+\z`)

func FuzzEffectKey(f *testing.F) {
	for _, s := range []string{"abc", "a:b", "a=3Ab", "x.y", "=", "", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if ek := effectKey(id, "k"); !kvKey.MatchString(ek) {
			t.Fatalf("effectKey(%q) = %q is not a valid KV key", id, ek)
		}
	})
}
