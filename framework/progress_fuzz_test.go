package framework

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/staterec"
)

// A record with a progress is encoded without reflection byte for byte as
// encoding/json does, and decodes back to the same progress.
func FuzzRecordProgressJSON(f *testing.F) {
	f.Add(int64(40), int64(160), "exporting rows")
	f.Add(int64(0), int64(0), "")
	f.Add(int64(7), int64(0), "é<&> \"q\"")
	f.Add(int64(-1), int64(3), "\u2028")
	f.Fuzz(func(t *testing.T, done, total int64, msg string) {
		p := Progress{Done: done, Total: total, Message: msg}
		rec := TaskRecord{ID: "t1", Priority: PriorityNormal, State: StateRunning,
			UpdatedAt: time.Unix(1790000000, 5).UTC(), Progress: p}
		want, err := json.Marshal(&rec)
		if err != nil {
			t.Skip(err)
		}
		got := wireJSON(&rec)
		if !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
		}
		var back TaskRecord
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("decode %s: %v", got, err)
		}
		// What ReportProgress accepts comes back as it was; anything
		// else (encoding/json writes bytes that are not UTF-8 as U+FFFD)
		// comes back as none or as a progress that obeys the rules.
		if staterec.CheckProgress(staterec.Progress(p)) == nil && back.Progress != p {
			t.Fatalf("progress %+v read back as %+v", p, back.Progress)
		}
		if !back.Progress.IsZero() && staterec.CheckProgress(staterec.Progress(back.Progress)) != nil {
			t.Fatalf("progress %+v read back as %+v, which breaks the rules", p, back.Progress)
		}
	})
}

// Whatever a record's progress holds, decoding it does not fail the
// record, and what it yields obeys ReportProgress's rules or is none.
func FuzzProgressDecode(f *testing.F) {
	for _, s := range []string{`{"done":1,"total":2,"message":"m"}`, `{"done":-1}`, `"x"`, `null`, `{"done":1e3}`,
		`{"done":3,"total":2}`, `{"message":"\u001b[2J"}`, `[]`, `{"done":9223372036854775807}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var p Progress
		if err := p.UnmarshalJSON(data); err != nil {
			t.Fatalf("UnmarshalJSON(%q) = %v, want nil", data, err)
		}
		if !p.IsZero() {
			if err := staterec.CheckProgress(staterec.Progress(p)); err != nil {
				t.Fatalf("UnmarshalJSON(%q) = %+v, which breaks the rules: %v", data, p, err)
			}
		}
	})
}
