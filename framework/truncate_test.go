package framework

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTruncateUTF8 checks the cut of Term reasons and records: at most n
// bytes, never inside a character.
func TestTruncateUTF8(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", maxTermReason-1) + "é" + "tail" // é straddles byte maxTermReason
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
		{long, maxTermReason, strings.Repeat("a", maxTermReason-1)},
	}
	for _, c := range cases {
		got := truncateUTF8(c.in, c.n)
		if got != c.want || len(got) > c.n && len(c.in) > c.n || !utf8.ValidString(got) {
			t.Errorf("truncateUTF8(%.20q…, %d) = %.20q… (%d bytes), want %.20q…", c.in, c.n, got, len(got), c.want)
		}
	}
}
