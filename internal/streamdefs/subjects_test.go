package streamdefs

import "testing"

func TestSubjectMatches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		filter, subject string
		want            bool
	}{
		{"jf.task.normal.email", "jf.task.normal.email", true},
		{"jf.task.normal.email", "jf.task.normal.Email", false},
		{"jf.task.*.email", "jf.task.high.email", true},
		{"jf.task.*.email", "jf.task.high.email.x", false},
		{"jf.task.>", "jf.task.high.email", true},
		{"jf.task.>", "jf.task", false},
		{"jf.task.normal.email", "jf.task.normal", false},
		{"jf.ord.email.*", "jf.ord.email.17", true},
	}
	for _, tc := range tests {
		if got := SubjectMatches(tc.filter, tc.subject); got != tc.want {
			t.Errorf("SubjectMatches(%q, %q) = %v, want %v", tc.filter, tc.subject, got, tc.want)
		}
	}
}
