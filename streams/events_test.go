package streams_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/streams"
)

// TestEventSubjects: event subjects parse back to their key, under the
// prefix of their names only.
func TestEventSubjects(t *testing.T) {
	t.Parallel()
	n := streams.MustNames("app")
	if got, err := n.ParseEventSubject(n.EventSubject("a.b/c")); err != nil || got != "a.b/c" {
		t.Errorf("ParseEventSubject: %q, %v", got, err)
	}
	if _, err := n.ParseEventSubject("jetflow.event.a"); !errors.Is(err, streams.ErrInvalidSubject) {
		t.Errorf("other prefix: %v", err)
	}
	if got := n.WaitSubject("a.b", "run1"); got != "app.waiting.a.b.run1" {
		t.Errorf("WaitSubject: %q", got)
	}
}

// FuzzValidateEventKey: an accepted key is one subject of literal tokens
// under the event prefix, and the subject parses back to it.
func FuzzValidateEventKey(f *testing.F) {
	for _, s := range []string{"k", "a.b", "a..b", "a.*", "a.>", "x/y:z=1"} {
		f.Add(s)
	}
	n := streams.MustNames("")
	f.Fuzz(func(t *testing.T, key string) {
		if streamdefs.ValidateEventKey(key) != nil {
			return
		}
		for _, tok := range strings.Split(key, ".") {
			if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
				t.Fatalf("accepted %q with token %q", key, tok)
			}
		}
		if got, err := n.ParseEventSubject(n.EventSubject(key)); err != nil || got != key {
			t.Fatalf("%q parsed back as %q, %v", key, got, err)
		}
	})
}
