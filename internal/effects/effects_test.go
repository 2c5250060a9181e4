package effects

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/testutil"
)

func newKV(t *testing.T) jetstream.KeyValue {
	t.Helper()
	_, js := testutil.JetStream(t, testutil.RunServer(t))
	kv, err := js.CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: "EFFECTS"})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

func call(attempt int) Call {
	return Call{TaskID: "t1", Attempt: attempt, Key: "charge", KVKey: "t1.charge", MaxValue: 64,
		ErrorText: func(s string) string { return strings.ToUpper(s) },
		Log:       slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func stored(t *testing.T, kv jetstream.KeyValue, key string) Record {
	t.Helper()
	e, err := kv.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// An effect runs once: the first delivery runs it and records its value,
// a later one gets the recorded value without running it.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	kv := newKV(t)
	runs := 0
	fn := func(context.Context) (json.RawMessage, error) { runs++; return json.RawMessage(`{"id":"ch_1"}`), nil }
	v, err := Run(t.Context(), kv, call(1), fn)
	if err != nil || v != nil {
		t.Fatalf("first run = %s, %v; want nil, nil (the caller keeps fn's value)", v, err)
	}
	if rec := stored(t, kv, "t1.charge"); rec.State != Done || rec.Attempt != 1 || string(rec.Value) != `{"id":"ch_1"}` {
		t.Errorf("record %+v", rec)
	}
	v, err = Run(t.Context(), kv, call(2), fn)
	if err != nil || string(v) != `{"id":"ch_1"}` || runs != 1 {
		t.Errorf("second run = %s, %v after %d runs; want the recorded value, one run", v, err, runs)
	}
}

// A failed effect releases its claim with its error: the next delivery
// runs it again.
func TestRunFailedRunsAgain(t *testing.T) {
	t.Parallel()
	kv := newKV(t)
	boom := errors.New("gateway 503")
	_, err := Run(t.Context(), kv, call(1), func(context.Context) (json.RawMessage, error) { return nil, boom })
	if err != boom {
		t.Fatalf("Run = %v; want fn's error", err)
	}
	if rec := stored(t, kv, "t1.charge"); rec.State != Failed || rec.Error != "GATEWAY 503" {
		t.Errorf("record %+v; want failed with the shortened error", rec)
	}
	ran := false
	if _, err := Run(t.Context(), kv, call(2), func(context.Context) (json.RawMessage, error) { ran = true; return nil, nil }); err != nil || !ran {
		t.Errorf("after a failure: ran %v, err %v; want run", ran, err)
	}
	if v, err := Run(t.Context(), kv, call(3), nil); err != nil || string(v) != "null" {
		t.Errorf("an effect applied without a value = %s, %v; want null", v, err)
	}
}

// A claim without outcome (the worker died mid-effect) is uncertain,
// unless the call asks to run it again; an unreadable record counts as
// such a claim.
func TestRunUncertain(t *testing.T) {
	t.Parallel()
	for _, existing := range []string{`{"state":"started","attempt":1}`, `{not json`, strings.Repeat("x", 4096)} {
		kv := newKV(t)
		if _, err := kv.Put(t.Context(), "t1.charge", []byte(existing)); err != nil {
			t.Fatal(err)
		}
		ran := false
		fn := func(context.Context) (json.RawMessage, error) { ran = true; return json.RawMessage(`1`), nil }
		var u *Uncertain
		if _, err := Run(t.Context(), kv, call(2), fn); !errors.As(err, &u) || ran {
			t.Fatalf("over %.20q: ran %v, err %v; want Uncertain", existing, ran, err)
		}
		if u.Error() == "" {
			t.Error("empty Uncertain error")
		}
		c := call(2)
		c.Rerun = true
		if _, err := Run(t.Context(), kv, c, fn); err != nil || !ran {
			t.Fatalf("over %.20q with Rerun: ran %v, err %v", existing, ran, err)
		}
		if rec := stored(t, kv, "t1.charge"); rec.State != Done || rec.Attempt != 2 {
			t.Errorf("record %+v", rec)
		}
	}
}

// A value over MaxValue, or one that cannot be encoded, is not recorded,
// and a later delivery is told so.
func TestRunValueOmitted(t *testing.T) {
	t.Parallel()
	cases := map[string]func(context.Context) (json.RawMessage, error){
		"too large": func(context.Context) (json.RawMessage, error) {
			return json.RawMessage(`"` + strings.Repeat("v", 100) + `"`), nil
		},
		"unencodable": func(context.Context) (json.RawMessage, error) {
			return nil, &Unrecordable{Err: errors.New("json: unsupported type")}
		},
	}
	for name, fn := range cases {
		kv := newKV(t)
		if v, err := Run(t.Context(), kv, call(1), fn); err != nil || v != nil {
			t.Fatalf("%s: first run = %s, %v", name, v, err)
		}
		if rec := stored(t, kv, "t1.charge"); rec.State != Done || !rec.Omitted || rec.Value != nil {
			t.Errorf("%s: record %+v; want done, value omitted", name, rec)
		}
		if _, err := Run(t.Context(), kv, call(2), fn); !errors.Is(err, ErrOmitted) {
			t.Errorf("%s: second run: %v; want ErrOmitted", name, err)
		}
	}
	if got := (&Unrecordable{Err: errors.New("x")}).Error(); !strings.Contains(got, "x") {
		t.Errorf("Unrecordable.Error = %q", got)
	}
}

// The outcome is recorded even when the caller's context ended while the
// effect ran.
func TestRunRecordsAfterCancel(t *testing.T) {
	t.Parallel()
	kv := newKV(t)
	ctx, cancel := context.WithCancel(t.Context())
	_, err := Run(ctx, kv, call(1), func(context.Context) (json.RawMessage, error) { cancel(); return json.RawMessage(`2`), nil })
	if err != nil {
		t.Fatal(err)
	}
	if rec := stored(t, kv, "t1.charge"); rec.State != Done || string(rec.Value) != "2" {
		t.Errorf("record %+v", rec)
	}
}

// A ledger that cannot be written is an error before the effect runs.
func TestRunLedgerError(t *testing.T) {
	t.Parallel()
	kv := newKV(t)
	ran := false
	c := call(1)
	c.KVKey = "bad key with spaces"
	_, err := Run(t.Context(), kv, c, func(context.Context) (json.RawMessage, error) { ran = true; return nil, nil })
	if err == nil || ran {
		t.Errorf("invalid key: ran %v, err %v; want an error and no run", ran, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if _, err := Run(ctx, kv, call(1), func(context.Context) (json.RawMessage, error) { ran = true; return nil, nil }); err == nil || ran {
		t.Errorf("ended context: ran %v, err %v; want an error and no run", ran, err)
	}
}
