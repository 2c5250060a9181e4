package staterec

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// Begin, End and Routed write the records the rules ask for, and only
// those: a tracked task's every outcome, an untracked task's final record
// when it is awaited, a routed task's "dead" record when tracked or
// awaited; End cuts the error text.
func TestTrackerTaskRecords(t *testing.T) {
	t.Parallel()
	w, kv := stateBucket(t)
	ensured := 0
	tr := NewTracker(w, 0, map[string]bool{"email": true}, func(context.Context) error { ensured++; return nil })

	// A tracked task: running, then retrying with the error cut.
	tracked := Record{ID: "b1", Type: "email", Priority: "normal", Attempt: 1, MaxAttempts: 3}
	var a *Attempt
	if err := tr.Begin(t.Context(), tracked, false, func() *Attempt { a = &Attempt{}; return a }); err != nil {
		t.Fatal(err)
	}
	if a == nil {
		t.Fatal("Begin of a tracked task did not take its attempt state")
	}
	readState(t, kv, "b1", Running)
	tr.End(tracked, false, a, Outcome{State: Retrying, Delay: time.Minute}, errors.New(strings.Repeat("x", 5000)))
	if got := readState(t, kv, "b1", Retrying); len(got["error"].(string)) != MaxError {
		t.Errorf("error of %d bytes, want %d", len(got["error"].(string)), MaxError)
	}

	// An untracked task: Begin ensures the bucket only when awaited; its
	// retry is not written, its final record is when awaited.
	plain := Record{ID: "b2", Type: "sms", Priority: "normal"}
	if err := tr.Begin(t.Context(), plain, false, func() *Attempt { t.Fatal("untracked task got attempt state"); return nil }); err != nil || ensured != 0 {
		t.Fatalf("Begin of an untracked task: %v, %d ensures", err, ensured)
	}
	if err := tr.Begin(t.Context(), plain, true, nil); err != nil || ensured != 1 {
		t.Fatalf("Begin of an awaited untracked task: %v, %d ensures", err, ensured)
	}
	tr.End(Record{ID: "b6", Type: "sms", Priority: "normal"}, false, nil, Outcome{State: Succeeded}, nil)
	tr.End(plain, true, nil, Outcome{State: Retrying}, errors.New("again"))
	tr.End(plain, true, nil, Outcome{State: Failed}, errors.New("boom"))
	if got := readState(t, kv, "b2", Failed); got["error"] != "boom" {
		t.Errorf("awaited record %v", got)
	}

	// Routed: written for a tracked or awaited task only.
	// Records are written in order: b3's would be stored before b4's.
	tr.Routed(Record{ID: "b3", Type: "sms", Priority: "normal"}, false, "lost")
	tr.Routed(Record{ID: "b4", Type: "sms", Priority: "normal"}, true, "lost")
	tr.Routed(Record{ID: "b5", Type: "email", Priority: "normal"}, false, "lost")
	readState(t, kv, "b4", Dead)
	readState(t, kv, "b5", Dead)
	if _, err := kv.Get(t.Context(), Key("b3")); err == nil {
		t.Error("a routed task neither tracked nor awaited got a record")
	}
	// Records are written in order: b6's would be stored before b2's.
	if _, err := kv.Get(t.Context(), Key("b6")); err == nil {
		t.Error("a task neither tracked nor awaited got a final record")
	}
}

// Asked creates the bucket for an untracked type and reports a failure
// with the task's ID; a tracked type needs nothing.
func TestTrackerAsked(t *testing.T) {
	t.Parallel()
	boom := errors.New("no permission")
	tr := NewTracker(nil, 0, map[string]bool{"email": true}, func(context.Context) error { return boom })
	if err := tr.Asked(t.Context(), Record{ID: "c1", Type: "email"}); err != nil {
		t.Errorf("tracked type: %v", err)
	}
	if err := tr.Asked(t.Context(), Record{ID: "c2", Type: "sms"}); !errors.Is(err, boom) || !strings.Contains(err.Error(), "c2") {
		t.Errorf("untracked type: %v", err)
	}
}
