package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"
)

// nastyStrings are strings whose JSON encoding takes every branch of
// encoding/json's string escaping.
var nastyStrings = []string{
	"", "a", "step-1", `quote " and \ backslash`, "<script>&amp;</script>", "tab\there\nnewline\r\b\f",
	"\x00\x01\x1f\x7f", "héllo wörld", "line\u2028sep\u2029", "bad \xff utf-8 \xc3", "emoji 😀", "\u00e9\u0301",
}

// nastyRaw are JSON values as step functions and callers hand them over:
// compact or not, with characters json.Marshal escapes; "" is an empty but
// non-nil value, which json.Marshal omits.
var nastyRaw = []string{
	"", `{}`, `[]`, `null`, `1`, `"s"`, `{"a":1,"b":[true,false,null]}`, `{ "a" : [ 1 , 2 ] }`, "\n[1,\t2]\n",
	`{"html":"<b>&</b>"}`, `"line` + "\u2028" + `"`, `{"nested":{"deep":{"x":"y"}}}`, `-0.5e10`,
}

// fillRandom sets every exported field of the value v points to, found by
// reflection, so that a field added to Run or StepStatus is covered
// without changing this test: zero a third of the time (omitempty and
// omitzero), a nasty value otherwise.
func fillRandom(t *testing.T, rnd *rand.Rand, v reflect.Value) {
	t.Helper()
	zones := []*time.Location{time.UTC, time.FixedZone("plus", 5*3600+30*60), time.FixedZone("minus", -8*3600)}
	for i := 0; i < v.NumField(); i++ {
		f := v.Field(i)
		if !v.Type().Field(i).IsExported() || rnd.IntN(3) == 0 {
			continue
		}
		switch f.Interface().(type) {
		case time.Time:
			tm := time.Unix(rnd.Int64N(1<<33), rnd.Int64N(1e9)).In(zones[rnd.IntN(len(zones))])
			if rnd.IntN(2) == 0 {
				tm = tm.Truncate(time.Second)
			}
			f.Set(reflect.ValueOf(tm))
			continue
		case json.RawMessage:
			f.Set(reflect.ValueOf(json.RawMessage(nastyRaw[rnd.IntN(len(nastyRaw))])))
			continue
		case *ParentRef:
			p := new(ParentRef)
			fillRandom(t, rnd, reflect.ValueOf(p).Elem())
			f.Set(reflect.ValueOf(p))
			continue
		case []*StepStatus:
			steps := make([]*StepStatus, rnd.IntN(5))
			for j := range steps {
				steps[j] = new(StepStatus)
				fillRandom(t, rnd, reflect.ValueOf(steps[j]).Elem())
			}
			f.Set(reflect.ValueOf(steps))
			continue
		}
		switch f.Kind() {
		case reflect.String:
			f.SetString(nastyStrings[rnd.IntN(len(nastyStrings))])
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Int:
			f.SetInt(rnd.Int64N(1<<40) - 1<<39)
		case reflect.Uint64:
			f.SetUint(rnd.Uint64())
		case reflect.Slice:
			if f.Type().Elem().Kind() != reflect.String {
				t.Fatalf("fillRandom: no generator for field %s of type %s", v.Type().Field(i).Name, f.Type())
			}
			n := rnd.IntN(4)
			s := reflect.MakeSlice(f.Type(), n, n)
			for j := range n {
				s.Index(j).SetString(nastyStrings[rnd.IntN(len(nastyStrings))])
			}
			f.Set(s)
		default:
			t.Fatalf("fillRandom: no generator for field %s of type %s", v.Type().Field(i).Name, f.Type())
		}
	}
}

// TestEncodeRunIsJSONMarshal holds encodeRun to json.Marshal's bytes on
// random documents, and checks that a document encoded verbatim decodes
// back to the run it was encoded from.
func TestEncodeRunIsJSONMarshal(t *testing.T) {
	rnd := rand.New(rand.NewPCG(1, 2))
	verbatims := 0
	for i := range 5000 {
		r := new(Run)
		fillRandom(t, rnd, reflect.ValueOf(r).Elem())
		if i%7 == 0 {
			r.Steps = []*StepStatus{} // empty, not nil
		}
		if c := cloneRun(r); !reflect.DeepEqual(c, r) {
			t.Fatalf("run %d: cloneRun differs:\n%#v\n%#v", i, c, r)
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		got, verbatim, err := encodeRun(r)
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("run %d:\nencodeRun:    %s\njson.Marshal: %s", i, got, want)
		}
		if !verbatim {
			continue
		}
		verbatims++
		back := new(Run)
		if err := json.Unmarshal(got, back); err != nil {
			t.Fatal(err)
		}
		r.Revision = 0
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("run %d was encoded verbatim but decodes differently:\n%#v\n%#v", i, back, r)
		}
	}
	if verbatims == 0 {
		t.Fatal("no run was encoded verbatim: the round trip went unchecked")
	}
}

// TestEncodeRunErrors: what json.Marshal refuses, encodeRun refuses.
func TestEncodeRunErrors(t *testing.T) {
	for name, r := range map[string]*Run{
		"raw input that is not JSON":  {ID: "r", Input: json.RawMessage(`{"a":`)},
		"raw output that is not JSON": {ID: "r", Steps: []*StepStatus{{Name: "s", Output: json.RawMessage(`nope`)}}},
		"year 10000":                  {ID: "r", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"negative year":               {ID: "r", Steps: []*StepStatus{{Name: "s", EndedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}}},
	} {
		if _, err := json.Marshal(r); err == nil {
			t.Fatalf("%s: json.Marshal accepts it; the case tests nothing", name)
		}
		if _, _, err := encodeRun(r); err == nil {
			t.Errorf("%s: encodeRun accepted it", name)
		}
	}
}

// TestDocMemo: the memo answers only for the bytes it was given, hands out
// copies, and stays within its bounds.
func TestDocMemo(t *testing.T) {
	m := &docMemo{entries: make(map[string]memoEntry)}
	r := &Run{ID: "a", Status: RunRunning, Input: json.RawMessage(`{"x":1}`), Steps: []*StepStatus{{Name: "s", After: []string{"t"}, Output: json.RawMessage(`2`)}}}
	data := []byte(`{"id":"a"}`)
	m.remember("a", data, r)
	if got := m.recall("a", []byte(`{"id":"a","status":"failed"}`)); got != nil {
		t.Fatal("recall answered for bytes it was not given")
	}
	if got := m.recall("b", data); got != nil {
		t.Fatal("recall answered for another run")
	}
	got := m.recall("a", bytes.Clone(data))
	if got == nil || !reflect.DeepEqual(got, r) {
		t.Fatalf("recall = %#v, want %#v", got, r)
	}
	// Copies share nothing with the memo or with r.
	got.Status, got.Input[0], got.Steps[0].State, got.Steps[0].After[0], got.Steps[0].Output[0] = RunFailed, '[', StepDone, "u", '3'
	r.Steps[0].Name = "changed"
	again := m.recall("a", data)
	if again.Status != RunRunning || string(again.Input) != `{"x":1}` || again.Steps[0].State != "" ||
		again.Steps[0].After[0] != "t" || string(again.Steps[0].Output) != "2" || again.Steps[0].Name != "s" {
		t.Fatalf("a recalled copy shares memory: %#v", again)
	}

	// Bounds: runs, bytes, the largest document.
	big := []byte(strings.Repeat("x", memoMaxBytes+1))
	m.remember("a", big, r)
	if m.recall("a", data) != nil || m.recall("a", big) != nil {
		t.Fatal("a document over memoMaxBytes was kept, or its run's older bytes were")
	}
	for i := range memoRuns + 10 {
		m.remember(strings.Repeat("r", 1+i%7)+string(rune('a'+i%26))+string(rune(i)), data, r)
	}
	if len(m.entries) > memoRuns || len(m.order) != len(m.entries) {
		t.Fatalf("%d entries and %d in order, the limit is %d", len(m.entries), len(m.order), memoRuns)
	}
	doc := make([]byte, memoMaxBytes)
	for i := range 2 * memoBytes / memoMaxBytes {
		m.remember(string(rune('A'+i)), doc, r)
	}
	if m.bytes > memoBytes {
		t.Fatalf("%d bytes kept, the limit is %d", m.bytes, memoBytes)
	}
	sum := 0
	for _, e := range m.entries {
		sum += len(e.data)
	}
	if sum != m.bytes {
		t.Fatalf("bytes = %d, entries hold %d", m.bytes, sum)
	}
}

// BenchmarkStepDocument is the document work of one step of a three-step
// chain, the store's round trips left out: read the run (decode), record
// the step's output (mutate), write it (encode). "encoding/json" is the
// store before decision 032; "codec" decodes each document (a memo miss);
// "memo" finds the document it wrote for the step before.
func BenchmarkStepDocument(b *testing.B) {
	now := time.Now().UTC()
	base := &Run{ID: "NUIDNUIDNUIDNUIDNUID01", Workflow: "bench", Status: RunRunning, Input: json.RawMessage(`{"order":42,"customer":"c-1"}`),
		CreatedAt: now, UpdatedAt: now, Steps: []*StepStatus{
			{Name: "reserve", State: StepDone, Attempts: 1, Output: json.RawMessage(`{"ok":true}`), Completion: 1, EnqueuedAt: now, StartedAt: now, EndedAt: now},
			{Name: "charge", After: []string{"reserve"}, State: StepEnqueued, EnqueuedAt: now},
			{Name: "ship", After: []string{"charge"}, State: StepPending},
		}}
	data, err := json.Marshal(base)
	if err != nil {
		b.Fatal(err)
	}
	complete := func(r *Run) {
		st := r.Steps[1]
		st.State, st.Attempts, st.Output, st.StartedAt, st.EndedAt = StepDone, 1, json.RawMessage(`{"charged":true}`), now, now
		r.Steps[2].State, r.Steps[2].EnqueuedAt = StepEnqueued, now
	}
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			r, err := decodeRun(base.ID, data, 7)
			if err != nil {
				b.Fatal(err)
			}
			complete(r)
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, hit := range []bool{false, true} {
		name := "codec"
		if hit {
			name = "memo"
		}
		b.Run(name, func(b *testing.B) {
			m := &docMemo{entries: make(map[string]memoEntry)}
			b.ReportAllocs()
			for b.Loop() {
				if hit {
					m.remember(base.ID, data, base)
				} else {
					m.forget(base.ID)
				}
				r := m.recall(base.ID, data)
				if r == nil {
					if r, err = decodeRun(base.ID, data, 7); err != nil {
						b.Fatal(err)
					}
				}
				complete(r)
				out, verbatim, err := encodeRun(r)
				if err != nil || !verbatim {
					b.Fatal(err, verbatim)
				}
				m.remember(base.ID, out, r)
			}
		})
	}
}

// TestDocMemoKeepsWhatItWillNeed checks the memo's admission: a full memo
// whose runs are young does not admit a new run (a worker behind a wide
// backlog keeps the runs it reaches next), one whose oldest run has been
// held for memoMinAge lets it go for the new one, and a held run's new
// document replaces its old one in place.
func TestDocMemoKeepsWhatItWillNeed(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	m := &docMemo{entries: make(map[string]memoEntry), clock: func() time.Time { return now }}
	r := &Run{ID: "x", Status: RunRunning}
	data := []byte(`{"id":"x"}`)
	id := func(i int) string { return fmt.Sprintf("run-%d", i) }
	for i := range memoRuns {
		m.remember(id(i), data, r)
	}
	m.remember("late", data, r)
	if m.recall("late", data) != nil || m.recall(id(0), data) == nil || len(m.entries) != memoRuns {
		t.Fatalf("a full memo of young runs admitted a new one, or dropped its oldest (%d entries)", len(m.entries))
	}
	// A held run is updated in place, young or not.
	newer := []byte(`{"id":"x","v":2}`)
	m.remember(id(0), newer, r)
	if m.recall(id(0), newer) == nil || m.recall(id(0), data) != nil {
		t.Fatal("a held run's new document did not replace its old one")
	}
	now = now.Add(memoMinAge)
	m.remember("late", data, r)
	if m.recall("late", data) == nil || m.recall(id(0), newer) != nil || m.recall(id(1), data) == nil {
		t.Fatal("the oldest run, held for memoMinAge, did not make room for the new one")
	}
	if len(m.entries) != memoRuns || len(m.order) != len(m.entries) {
		t.Fatalf("%d entries and %d in order, want %d", len(m.entries), len(m.order), memoRuns)
	}
}
