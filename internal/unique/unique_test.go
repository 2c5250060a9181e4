package unique

import (
	"errors"
	"strings"
	"testing"
	"time"
)

var rules = Validators{
	TaskType: func(s string) error {
		if s == "" || strings.ContainsAny(s, " *>") {
			return errors.New("bad type")
		}
		return nil
	},
	ID:         func(string) error { return nil },
	MaxTypeLen: 128,
}

func TestHeadersAndParseKey(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	custom := map[string]string{"X-A": "1"}
	byPayload := Spec{Period: time.Minute}.Headers("email", []byte("p"), now, custom)
	byKey := Spec{Period: time.Minute, Key: "p", HasKey: true, UntilDone: true}.Headers("email", []byte("p"), now, custom)
	if len(custom) != 1 {
		t.Fatalf("custom headers modified: %v", custom)
	}
	if byPayload[HeaderKey] == byKey[HeaderKey] {
		t.Error("a caller key equal to the payload gives the same uniqueness key")
	}
	if byPayload[HeaderUntil] != "2026-11-30T12:01:00Z" || byPayload[HeaderRevision] != "" || byKey[HeaderRevision] != "0" {
		t.Errorf("headers: %v / %v", byPayload, byKey)
	}
	if typ, err := rules.ParseKey(byKey[HeaderKey]); err != nil || typ != "email" {
		t.Errorf("ParseKey = %q, %v; want email", typ, err)
	}
	hash := strings.Repeat("a", 64)
	for _, k := range []string{"", "email." + strings.ToUpper(hash), "email-" + hash, "bad type." + hash, "x." + hash[:63]} {
		if _, err := rules.ParseKey(k); err == nil {
			t.Errorf("ParseKey(%q) = nil error", k)
		}
	}
}

func TestReleaseTarget(t *testing.T) {
	t.Parallel()
	key := "email." + strings.Repeat("0", 64)
	cut := func(s string, n int) string { return s[:min(len(s), n)] }
	if _, ok, err := rules.ReleaseTarget("email", key, "", cut); ok || err != nil {
		t.Errorf("no revision: ok %v err %v, want nothing to release", ok, err)
	}
	if rev, ok, err := rules.ReleaseTarget("email", key, "7", cut); !ok || err != nil || rev != 7 {
		t.Errorf("revision 7: %d %v %v", rev, ok, err)
	}
	for _, tc := range []struct{ typ, rev string }{{"sms", "7"}, {"email", "0"}, {"email", "x"}} {
		if _, ok, err := rules.ReleaseTarget(tc.typ, key, tc.rev, cut); ok || err == nil {
			t.Errorf("%+v: ok %v err %v, want an error", tc, ok, err)
		}
	}
}
