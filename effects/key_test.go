package effects

import (
	"regexp"
	"strings"
	"testing"
)

// kvKey is what the jetstream package accepts as a KV key.
var kvKey = regexp.MustCompile(`\A[-/_=\.a-zA-Z0-9]+\z`)

// TestEffectKeyScopedByType pins the key scheme that permissions are
// granted on: "$KV.JETFLOW_EFFECTS.<type>.>" with the type escaped like
// state keys.
func TestEffectKeyScopedByType(t *testing.T) {
	t.Parallel()
	tests := []struct{ typ, id, key, want string }{
		{"email", "t1", "send", "email.t1.send"},
		{"payments.charge", "order-1042", "charge", "payments=2Echarge.order-1042.charge"},
		{"a.b.c", "x:y", "k=1", "a=2Eb=2Ec.x=3Ay.k=3D1"},
	}
	for _, tc := range tests {
		if got := effectKey(tc.typ, tc.id, tc.key); got != tc.want {
			t.Errorf("effectKey(%q, %q, %q) = %q, want %q", tc.typ, tc.id, tc.key, got, tc.want)
		}
	}
	if effectKey("a.b", "c", "k") == effectKey("a", "b.c", "k") {
		t.Error("types and IDs that share a dotted form share a key")
	}
}

func FuzzEffectKey(f *testing.F) {
	for _, s := range []string{"abc", "a:b", "a=3Ab", "x.y", "=", "", "é"} {
		f.Add("payments.charge", s)
	}
	f.Fuzz(func(t *testing.T, typ, id string) {
		ek := effectKey(typ, id, "k")
		if !kvKey.MatchString(ek) {
			t.Fatalf("effectKey(%q, %q) = %q is not a valid KV key", typ, id, ek)
		}
		// Three tokens, the first naming the type alone: a permission on
		// "<type>.>" covers exactly that type's keys.
		tokens := strings.Split(ek, ".")
		if len(tokens) != 3 || tokens[0] != effectKey(typ, "i", "k")[:len(tokens[0])] || tokens[2] != "k" {
			t.Fatalf("effectKey(%q, %q) = %q: want <type>.<id>.k", typ, id, ek)
		}
		if tokens[0] != strings.SplitN(effectKey(typ, "other", "k"), ".", 2)[0] {
			t.Fatalf("effectKey(%q, ...) type token depends on the ID: %q", typ, ek)
		}
	})
}
