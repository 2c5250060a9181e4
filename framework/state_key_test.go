package framework

import (
	"bytes"
	"encoding/json"
	"regexp"
	"testing"
	"time"
)

// kvKey is what the jetstream package accepts as a KV key.
var kvKey = regexp.MustCompile(`\A[-/_=\.a-zA-Z0-9]+\z`)

func TestStateKey(t *testing.T) {
	t.Parallel()
	for id, want := range map[string]string{
		"abc123":                        "abc123",
		"cron-nightly-20260101T000000Z": "cron-nightly-20260101T000000Z",
		"a:b":                           "a=3Ab",
		"a=b":                           "a=3Db",
		"a.b":                           "a=2Eb",
		"":                              "=",
	} {
		if got := stateKey(id); got != want {
			t.Errorf("stateKey(%q) = %q, want %q", id, got, want)
		}
	}
}

func FuzzStateKey(f *testing.F) {
	for _, s := range []string{"abc", "a:b", "a=3Ab", "x.y", "=", "", "é"} {
		f.Add(s, s+"=")
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		ka, kb := stateKey(a), stateKey(b)
		if !kvKey.MatchString(ka) {
			t.Fatalf("stateKey(%q) = %q is not a valid KV key", a, ka)
		}
		if a != b && ka == kb {
			t.Fatalf("stateKey(%q) == stateKey(%q) == %q", a, b, ka)
		}
	})
}

func FuzzRecordJSON(f *testing.F) {
	f.Add("id1", "a.b", "boom", "nightly", uint64(7), int64(1790000000123456789), []byte(`{"x":1}`))
	f.Add("é<&>", "", "line\nbreak\t\"q\" \u2028", "", uint64(0), int64(0), []byte(nil))
	f.Add("\xff", "t", "\x00", "s", uint64(1), int64(-1), []byte(`"s"`))
	f.Fuzz(func(t *testing.T, id, typ, errText, sched string, seq uint64, unix int64, result []byte) {
		at := time.Unix(0, unix).UTC()
		rec := TaskRecord{ID: id, Type: typ, Priority: PriorityHigh, State: StateRetrying, Attempt: 2, MaxAttempts: 5,
			Error: errText, Schedule: sched, Sequence: seq, EnqueuedAt: at, StartedAt: at.Add(time.Second),
			NextAttemptAt: at.Add(time.Minute), UpdatedAt: at}
		if json.Valid(result) {
			var buf bytes.Buffer
			if json.Compact(&buf, result) == nil {
				rec.Result = buf.Bytes()
			}
		}
		want, err := json.Marshal(&rec)
		if err != nil {
			t.Skip(err)
		}
		if got := rec.appendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("appendJSON:\n got %s\nwant %s", got, want)
		}
	})
}
