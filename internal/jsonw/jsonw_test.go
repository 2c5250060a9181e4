package jsonw

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// Each writer gives the bytes encoding/json gives, which is what the
// documents' readers (and their byte-for-byte comparisons) expect.

func mustMarshal(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestString(t *testing.T) {
	cases := []struct{ name, in string }{
		{"plain", "payments.charge"},
		{"empty", ""},
		{"quote and backslash", `a"b\c`},
		{"HTML", "<script>&amp;</script>"},
		{"ampersand alone", "R&D"},
		{"greater-than alone", "a>b"},
		{"control characters", "a\nb\tc\x00d\x1f"},
		{"DEL", "a\x7fb"},
		{"non-ASCII", "café €"},
		{"line separators", "a\u2028b\u2029c"},
		{"invalid UTF-8", "a\xffb\xc3"},
		{"long", strings.Repeat("x", 1<<16)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := string(String([]byte("prefix:"), c.in))
			if want := "prefix:" + mustMarshal(t, c.in); got != want {
				t.Errorf("String(%q) = %q; want %q", c.in, got, want)
			}
		})
	}
}

func TestTime(t *testing.T) {
	cases := []time.Time{
		time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC),
		time.Date(2026, 12, 4, 12, 0, 0, 123456789, time.UTC),
		time.Date(2026, 12, 4, 12, 0, 0, 5, time.FixedZone("X", 3600+1800)),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		{},
	}
	for _, tm := range cases {
		if got, want := string(Time(nil, tm)), mustMarshal(t, tm); got != want {
			t.Errorf("Time(%v) = %s; want %s", tm, got, want)
		}
	}
	// Years encoding/json refuses: a valid JSON string all the same.
	for _, tm := range []time.Time{time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Unix(math.MaxInt64/2, 0)} {
		got := Time(nil, tm)
		var s string
		if err := json.Unmarshal(got, &s); err != nil {
			t.Errorf("Time(%v) = %s: not a JSON string: %v", tm, got, err)
		}
	}
}

func TestRaw(t *testing.T) {
	cases := []struct{ name, in string }{
		{"number", `42`},
		{"object", `{"a":[1,2,{"b":null}]}`},
		{"HTML in a string", `{"a":"<b>&</b>"}`},
		{"line separator", "\"a\u2028b\u2029\""},
		{"other E2 character", `"a€b"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := string(Raw([]byte("["), []byte(c.in)))
			if want := "[" + mustMarshal(t, json.RawMessage(c.in)); got != want {
				t.Errorf("Raw(%s) = %s; want %s", c.in, got, want)
			}
		})
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "abc", "<&>", "\u2028", "\xff", "a\"b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(String(nil, s)), mustMarshal(t, s); got != want {
			t.Errorf("String(%q) = %q; want %q", s, got, want)
		}
	})
}

func FuzzRaw(f *testing.F) {
	for _, s := range []string{`1`, `{"a":"<>"}`, "\"\u2028\"", `[true,null]`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(s)) != nil || compact.String() != s {
			return // Raw takes values as json.Marshal writes them: valid and compact
		}
		if got, want := string(Raw(nil, []byte(s))), mustMarshal(t, json.RawMessage(s)); got != want {
			t.Errorf("Raw(%s) = %s; want %s", s, got, want)
		}
	})
}
