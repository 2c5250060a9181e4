package framework

import (
	"regexp"
	"testing"
)

// kvKey is what the jetstream package accepts as a KV key.
var kvKey = regexp.MustCompile(`\A[-/_=\.a-zA-Z0-9]+\z`)

func TestStateKey(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"abc123":                        "abc123",
		"cron-nightly-20260101T000000Z": "cron-nightly-20260101T000000Z",
		"a:b":                           "a=3Ab",
		"a=b":                           "a=3Db",
		"a.b":                           "a=2Eb",
		"":                              "=",
	} {
		if got := stateKey(id); got != want {
			t.Errorf("stateKey(%q) = %q, want %q", id, got, want)
		}
	}
}

func FuzzStateKey(f *testing.F) {
	for _, s := range []string{"abc", "a:b", "a=3Ab", "x.y", "=", "", "é"} {
		f.Add(s, s+"=")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := stateKey(a), stateKey(b)
		if !kvKey.MatchString(ka) {
			t.Fatalf("stateKey(%q) = %q is not a valid KV key", a, ka)
		}
		if a != b && ka == kb {
			t.Fatalf("stateKey(%q) == stateKey(%q) == %q", a, b, ka)
		}
		if ek := effectKey(a, "k"); !kvKey.MatchString(ek) {
			t.Fatalf("effectKey(%q) = %q is not a valid KV key", a, ek)
		}
	})
}
