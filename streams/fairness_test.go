package streams_test

import (
	"errors"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
)

func TestFairSubject(t *testing.T) {
	n := streams.MustNames("app")
	for _, key := range []string{"acme", " a.b *>", "ключ", "x/y=z"} {
		s := n.FairSubject(streams.PriorityHigh, "billing.charge", key)
		p, typ, k, err := n.ParseFairSubject(s)
		if err != nil || p != streams.PriorityHigh || typ != "billing.charge" || k != key {
			t.Errorf("%q: parsed %v %q %q %v", s, p, typ, k, err)
		}
	}
	if got := n.FairKeys(streams.PriorityLow, "a.b"); got != "app.fair.a.b.low.*" {
		t.Errorf("FairKeys = %q", got)
	}
	if n.FairStream() != "APP_FAIR" || n.FairWildcard() != "app.fair.>" {
		t.Errorf("stream %q wildcard %q", n.FairStream(), n.FairWildcard())
	}
	for _, bad := range []string{"app.fair", "app.fair.x", "app.fair.t.normal", "app.fair.t.urgent.YQ",
		"app.fair.T.normal.YQ", "app.fair.t.normal.!!", "app.fair.t.normal.", "other.fair.t.normal.YQ", "app.fair..normal.YQ"} {
		if _, _, _, err := n.ParseFairSubject(bad); err == nil {
			t.Errorf("%q parsed", bad)
		} else if !errors.Is(err, streams.ErrInvalidSubject) && !errors.Is(err, streams.ErrInvalidPriority) && !errors.Is(err, streams.ErrInvalidTaskType) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func FuzzParseFairSubject(f *testing.F) {
	n := streams.MustNames("jetflow")
	f.Add("jetflow.fair.a.normal.YQ")
	f.Add("jetflow.fair.a.b.critical.a2V5")
	f.Add("jetflow.fair..")
	f.Fuzz(func(t *testing.T, s string) {
		p, typ, key, err := n.ParseFairSubject(s)
		if err != nil {
			return
		}
		if again := n.FairSubject(p, typ, key); again != s {
			t.Fatalf("%q parsed to %v %q %q, which makes %q", s, p, typ, key, again)
		}
	})
}
