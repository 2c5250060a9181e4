package streamdefs

import "strings"

// SubjectMatches reports whether subject matches the filter, with NATS
// wildcards ("*" one token, ">" the rest).
func SubjectMatches(filter, subject string) bool {
	f := strings.Split(filter, ".")
	s := strings.Split(subject, ".")
	for i, tok := range f {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || (tok != "*" && tok != s[i]) {
			return false
		}
	}
	return len(f) == len(s)
}
