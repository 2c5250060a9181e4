package debounce

import (
	"encoding/json"
	"testing"

	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestTrimKeepsWhatJoinedAfterTheRun: the payloads that joined a collecting
// burst after its run was enqueued stay for the next run; the ones that ran
// go, and a record of another burst is left alone.
func TestTrimKeepsWhatJoinedAfterTheRun(t *testing.T) {
	_, js := testutil.JetStream(t, testutil.RunServer(t))
	ctx := t.Context()
	if _, err := streams.Ensure(ctx, js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	kv, err := bucket(ctx, js, streams.MustNames(""))
	if err != nil {
		t.Fatal(err)
	}
	x := &plugin{kv: kv}
	put := func(first int64, payloads ...string) {
		rec := record{First: first, Last: "dbc-x", Collect: true}
		for _, p := range payloads {
			rec.Payloads = append(rec.Payloads, json.RawMessage(`"`+p+`"`))
		}
		b, _ := json.Marshal(rec)
		if _, err := kv.Put(ctx, "t.k", b); err != nil {
			t.Fatal(err)
		}
	}
	payloads := func() []string {
		e, err := kv.Get(ctx, "t.k")
		if err != nil {
			return nil
		}
		var rec record
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, p := range rec.Payloads {
			out = append(out, string(p))
		}
		return out
	}

	put(5, "a", "b", "c")
	if err := x.trim(ctx, "t.k", 5, 2); err != nil {
		t.Fatal(err)
	}
	if got := payloads(); len(got) != 1 || got[0] != `"c"` {
		t.Fatalf("after trimming 2: %v, want [\"c\"]", got)
	}
	if err := x.trim(ctx, "t.k", 4, 1); err != nil { // another burst's run
		t.Fatal(err)
	}
	if got := payloads(); len(got) != 1 {
		t.Fatalf("a run of another burst trimmed this one: %v", got)
	}
	if err := x.trim(ctx, "t.k", 5, 1); err != nil {
		t.Fatal(err)
	}
	if got := payloads(); got != nil {
		t.Fatalf("after trimming everything: %v, want no record", got)
	}
}
