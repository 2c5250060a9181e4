package textcut

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestCut checks the cut: at most n bytes, never inside a character.
func TestCut(t *testing.T) {
	t.Parallel()
	const limit = 1024
	long := strings.Repeat("a", limit-1) + "é" + "tail" // é straddles byte limit
	cases := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"", 0, ""},
		{"abc", 0, ""},
		{"héllo", 2, "h"},
		{"héllo", 3, "hé"},
		{"日本語", 4, "日"},
		{long, limit, strings.Repeat("a", limit-1)},
	}
	for _, c := range cases {
		got := Cut(c.in, c.n)
		if got != c.want || len(got) > c.n && len(c.in) > c.n || !utf8.ValidString(got) {
			t.Errorf("Cut(%.20q…, %d) = %.20q… (%d bytes), want %.20q…", c.in, c.n, got, len(got), c.want)
		}
	}
}
