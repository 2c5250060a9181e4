package framework

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/internal/staterec"
)

// A state record's JSON is written (staterec.Record.AppendJSON) and read
// back (staterec.Decode) without TaskRecord, its public form: these check
// both against what encoding/json does with a TaskRecord.

// wireJSON is the JSON of r as staterec writes it.
func wireJSON(r *TaskRecord) []byte {
	prio := "normal"
	if r.Priority.Valid() {
		prio = r.Priority.String()
	}
	rec := staterec.Record{ID: r.ID, Type: r.Type, Priority: prio, State: string(r.State),
		Attempt: r.Attempt, MaxAttempts: r.MaxAttempts, Error: r.Error, Schedule: r.Schedule, Sequence: r.Sequence,
		EnqueuedAt: r.EnqueuedAt, ScheduledFor: r.ScheduledFor, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
		NextAttemptAt: r.NextAttemptAt, UpdatedAt: r.UpdatedAt, Progress: staterec.Progress(r.Progress), Result: r.Result}
	return rec.AppendJSON(nil)
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
		if got := wireJSON(&rec); !bytes.Equal(got, want) {
			t.Fatalf("AppendJSON:\n got %s\nwant %s", got, want)
		}
	})
}

// Whatever a record holds, staterec.Decode accepts it when encoding/json
// accepts it as a TaskRecord, and reads the same record, or fails with the
// same error (but for the package of a value that is not an object).
func FuzzRecordDecode(f *testing.F) {
	for _, s := range []string{
		`{"id":"a","type":"t.x","priority":"high","state":"retrying","attempt":2,"max_attempts":5,"error":"boom",` +
			`"schedule":"s","seq":7,"enqueued_at":"2026-03-02T10:15:04.5Z","scheduled_for":"2026-03-02T10:15:04+02:00",` +
			`"started_at":"2026-03-02T10:15:05Z","finished_at":"2026-03-02T10:15:06Z","next_attempt_at":"2026-03-02T10:16:04Z",` +
			`"updated_at":"2026-03-02T10:15:04Z","progress":{"done":1,"total":2,"message":"m"},"result":{"x":[1,2]}}`,
		`{"ID":"b","Priority":"low","STATE":"dead","progress":{"done":3,"total":2}}`,
		`{"id":"c","priority":"urgent"}`, `{"id":"d","priority":2}`, `{"id":"e","attempt":"1"}`,
		`{"id":"f","updated_at":"yesterday"}`, `{"id":"g","result":null,"progress":null}`, `[]`, `null`, `{"id":1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want TaskRecord
		werr := json.Unmarshal(data, &want)
		rec, err := staterec.Decode(data)
		// A value that is not an object names the type with its package.
		if (err == nil) != (werr == nil) || err != nil && strings.Replace(err.Error(), "staterec.", "framework.", 1) != werr.Error() {
			t.Fatalf("Decode(%q): error %v; encoding/json: %v", data, err, werr)
		}
		if err != nil {
			return
		}
		if got := taskRecord(&rec); !reflect.DeepEqual(*got, want) {
			t.Fatalf("Decode(%q):\n got %+v\nwant %+v", data, *got, want)
		}
	})
}
