package streams_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
)

func TestValidateEventKey(t *testing.T) {
	t.Parallel()
	for _, key := range []string{"k", "payment.confirmed.order-42", "payment.confirmed/order-42", "a:b=c_d-e", strings.Repeat("k", streams.MaxEventKeyLen)} {
		if err := streams.ValidateEventKey(key); err != nil {
			t.Errorf("%q: %v", key, err)
		}
	}
	for _, key := range []string{"", ".", "a.", ".a", "a..b", "a b", "a.*", "a.>", "a\tb", "é", strings.Repeat("k", streams.MaxEventKeyLen+1)} {
		if err := streams.ValidateEventKey(key); !errors.Is(err, streams.ErrInvalidEventKey) {
			t.Errorf("%q: %v, want ErrInvalidEventKey", key, err)
		}
	}
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
		if streams.ValidateEventKey(key) != nil {
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
