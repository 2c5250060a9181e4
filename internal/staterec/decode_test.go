package staterec

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A record written by AppendJSON reads back as it was.
func TestDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 2, 10, 15, 4, 5, time.UTC)
	want := Record{ID: "a:1", Type: "email.send", Priority: "critical", State: Retrying, Attempt: 2, MaxAttempts: 5,
		Error: "boom \"x\"", Schedule: "nightly", Sequence: 42, EnqueuedAt: at, ScheduledFor: at.Add(time.Minute),
		StartedAt: at.Add(2 * time.Minute), FinishedAt: at.Add(3 * time.Minute), NextAttemptAt: at.Add(time.Hour),
		UpdatedAt: at, Progress: Progress{Done: 3, Total: 9, Message: "rows"}, Result: []byte(`{"n":[1,2]}`)}
	data := want.AppendJSON(nil)
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if again := got.AppendJSON(nil); !bytes.Equal(again, data) {
		t.Fatalf("Decode then AppendJSON:\n got %s\nwant %s", again, data)
	}
	if got.Priority != "critical" || got.Progress != want.Progress || !got.NextAttemptAt.Equal(want.NextAttemptAt) || got.Revision != 0 {
		t.Fatalf("Decode = %+v", got)
	}
}

// Decode reads what encoding/json would read into framework.TaskRecord,
// and fails where it fails.
func TestDecode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, data string
		check      func(Record) bool
		fails      string // part of the error; "" for none
	}{
		{"empty", `{}`, func(r Record) bool { return r.Priority == "normal" && r.ID == "" && r.Progress.IsZero() }, ""},
		{"keys of any case", `{"ID":"x","Priority":"low","STATE":"dead"}`,
			func(r Record) bool { return r.ID == "x" && r.Priority == "low" && r.State == Dead }, ""},
		{"unknown keys", `{"id":"x","revision":7,"extra":[1]}`, func(r Record) bool { return r.ID == "x" && r.Revision == 0 }, ""},
		{"forged progress", `{"progress":{"done":5,"total":2,"message":"m"}}`, func(r Record) bool { return r.Progress.IsZero() }, ""},
		{"progress of another type", `{"progress":"half"}`, func(r Record) bool { return r.Progress.IsZero() }, ""},
		{"null progress and result", `{"progress":null,"result":null}`,
			func(r Record) bool { return r.Progress.IsZero() && string(r.Result) == "null" }, ""},
		{"unknown priority", `{"priority":"urgent"}`, nil, "urgent"},
		{"numeric priority", `{"priority":1}`, nil, "cannot unmarshal"},
		{"bad time", `{"updated_at":"yesterday"}`, nil, "parsing time"},
		{"string attempt", `{"attempt":"2"}`, nil, "Go struct field TaskRecord.attempt"},
		{"not an object", `[]`, nil, "cannot unmarshal"},
		{"not JSON", `{`, nil, "unexpected end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := Decode([]byte(tc.data))
			switch {
			case tc.fails != "" && (err == nil || !strings.Contains(err.Error(), tc.fails)):
				t.Fatalf("Decode(%s) = %+v, %v; want an error saying %q", tc.data, r, err, tc.fails)
			case tc.fails == "" && err != nil:
				t.Fatalf("Decode(%s): %v", tc.data, err)
			case tc.fails == "" && !tc.check(r):
				t.Fatalf("Decode(%s) = %+v", tc.data, r)
			}
		})
	}
}

// kvKey is what the jetstream package accepts as a KV key.
var kvKey = regexp.MustCompile(`\A[-/_=\.a-zA-Z0-9]+\z`)

// Key gives every ID a valid KV key of its own.
func FuzzKey(f *testing.F) {
	for _, s := range []string{"abc", "a:b", "a=3Ab", "x.y", "=", "", "é", "cron-nightly-20260101T000000Z"} {
		f.Add(s, s+"=")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := Key(a), Key(b)
		if !kvKey.MatchString(ka) {
			t.Fatalf("Key(%q) = %q is not a valid KV key", a, ka)
		}
		if a != b && ka == kb {
			t.Fatalf("Key(%q) == Key(%q) == %q", a, b, ka)
		}
	})
}
