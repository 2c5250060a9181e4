package stranded_test

import (
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/internal/stranded"
	"github.com/jetflow-io/jetflow/streams"
)

func TestUnread(t *testing.T) {
	t.Parallel()
	names := streams.MustNames("jf")
	served := func(typ string) (stranded.Served, bool) {
		switch typ {
		case "normal-only":
			return stranded.Served{Priorities: []streams.Priority{streams.PriorityNormal}}, true
		case "ordered":
			return stranded.Served{Priorities: []streams.Priority{streams.PriorityNormal}, Ordered: true}, true
		case "ordered-old":
			return stranded.Served{Priorities: []streams.Priority{streams.PriorityNormal}, Ordered: true, OldOrdered: true}, true
		}
		return stranded.Served{}, false
	}
	tests := []struct {
		name, subject, typ, why string // why: a part of the reason, "" for none
	}{
		{"served priority", names.TaskSubject(streams.PriorityNormal, "normal-only"), "normal-only", ""},
		{"unserved priority", names.TaskSubject(streams.PriorityHigh, "normal-only"), "normal-only", "this worker serves normal"},
		{"another worker's type", names.TaskSubject(streams.PriorityHigh, "other"), "other", ""},
		{"ordered, not registered ordered", names.OrderedSubject("normal-only", 0), "normal-only", "framework.WithOrdering"},
		{"ordered, registered ordered", names.OrderedSubject("ordered", 0), "ordered", ""},
		{"ordered, another worker's type", names.OrderedSubject("other", 0), "other", ""},
		{"earlier version's slot, not read", names.LegacyOrderedSubject("ordered", 9), "ordered", "earlier version"},
		{"earlier version's slot, read", names.LegacyOrderedSubject("ordered-old", 9), "ordered-old", ""},
		{"earlier version's slot, another worker's type", names.LegacyOrderedSubject("other", 9), "other", ""},
		{"not a task subject", "elsewhere.x", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			typ, why := stranded.Unread(names, tc.subject, served)
			if typ != tc.typ || (tc.why == "") != (why == "") || !strings.Contains(why, tc.why) {
				t.Errorf("Unread(%q) = %q, %q; want %q, containing %q", tc.subject, typ, why, tc.typ, tc.why)
			}
		})
	}
}
