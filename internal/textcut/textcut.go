// Package textcut cuts text read from the wire or from errors to a size
// that fits a header, a record or a document.
package textcut

import "unicode/utf8"

// Cut returns s cut to at most n bytes without splitting a UTF-8 character.
func Cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
