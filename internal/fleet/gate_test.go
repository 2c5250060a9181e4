package fleet_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/testutil"
)

// TestParseVersion: only the digits of 1 to MaxPayloadVersion are a
// version; no header is version 1.
func TestParseVersion(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]int{"": 1, "1": 1, "7": 7, strconv.Itoa(fleet.MaxPayloadVersion): fleet.MaxPayloadVersion} {
		if v, err := fleet.ParseVersion(s); err != nil || v != want {
			t.Errorf("ParseVersion(%q) = %d, %v; want %d", s, v, err, want)
		}
	}
	for _, s := range []string{"0", "-1", "+1", "01", "1.0", " 1", "x", strconv.Itoa(fleet.MaxPayloadVersion + 1)} {
		if v, err := fleet.ParseVersion(s); err == nil {
			t.Errorf("ParseVersion(%q) = %d, want an error", s, v)
		}
	}
}

// TestGateCheck: an accepted version runs; a bad header is corrupt; an
// unaccepted one is handed back, quickly while a live worker accepts it,
// and fails once nobody did within the grace; every refusal is noted.
func TestGateCheck(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	servedBy := func(v int) *fleet.Listing {
		return &fleet.Listing{Records: []fleet.Record{{ID: "w2", Types: []fleet.Serves{{Type: "t", Versions: []int{v}}}}}}
	}
	var listErrs int
	g := &fleet.Gate{Grace: time.Minute, Interval: time.Hour,
		List:       func() (*fleet.Listing, error) { return servedBy(3), nil },
		ListFailed: func(string, int, error) { listErrs++ }}
	h := func(kv ...string) nats.Header {
		out := nats.Header{}
		for i := 0; i < len(kv); i += 2 {
			out.Set(kv[i], kv[i+1])
		}
		return out
	}
	accepted := []int{1, 2}

	if v, _, err := g.Check(accepted, "t", h(), now); v != fleet.Run || err != nil {
		t.Errorf("no header: %v %v, want Run", v, err)
	}
	if v, _, err := g.Check(accepted, "t", h(fleet.HeaderPayloadVersion, "2"), now); v != fleet.Run || err != nil {
		t.Errorf("version 2: %v %v, want Run", v, err)
	}
	if v, _, err := g.Check(accepted, "t", h(fleet.HeaderPayloadVersion, "02"), now); v != fleet.Corrupt || err == nil {
		t.Errorf("bad header: %v %v, want Corrupt with an error", v, err)
	}
	if n := len(g.Refused.Snapshot()); n != 0 {
		t.Fatalf("refusals noted before any refusal: %d", n)
	}

	// Served elsewhere: back after RetryServed, long past the grace too.
	since := now.Add(-time.Hour)
	v, d, err := g.Check(accepted, "t", h(fleet.HeaderPayloadVersion, "3",
		taskmsg.HeaderVersionRefusedSince, taskmsg.FormatTime(since), taskmsg.HeaderVersionRefusals, "5"), now)
	if v != fleet.Back || err != nil || d.Delay != fleet.RetryServed || d.Next() != 6 || !d.Since.Equal(since) {
		t.Errorf("served version 3: %v %+v %v", v, d, err)
	}
	// Nobody serves version 4: back while within the grace, then failed.
	if v, d, err = g.Check(accepted, "t", h(fleet.HeaderPayloadVersion, "4"), now); v != fleet.Back || err != nil || d.Delay != fleet.RetryBase {
		t.Errorf("unserved version 4, first refusal: %v %+v %v", v, d, err)
	}
	v, _, err = g.Check(accepted, "t", h(fleet.HeaderPayloadVersion, "4",
		taskmsg.HeaderVersionRefusedSince, taskmsg.FormatTime(since)), now)
	if v != fleet.NoWorker || err == nil {
		t.Errorf("unserved version 4 past the grace: %v %v, want NoWorker with an error", v, err)
	}
	refused := g.Refused.Snapshot()
	if len(refused) != 2 {
		t.Errorf("refusals %+v, want versions 3 and 4", refused)
	}

	// A registry that cannot be read counts as nobody, and is reported.
	broken := &fleet.Gate{Grace: time.Minute, Interval: time.Hour,
		List:       func() (*fleet.Listing, error) { return nil, errors.New("no registry") },
		ListFailed: func(string, int, error) { listErrs++ }}
	v, _, _ = broken.Check(accepted, "t", h(fleet.HeaderPayloadVersion, "3",
		taskmsg.HeaderVersionRefusedSince, taskmsg.FormatTime(since)), now)
	if v != fleet.NoWorker || listErrs != 1 {
		t.Errorf("unreadable registry: %v, %d errors reported; want NoWorker, 1", v, listErrs)
	}
}

// TestStoreHandBack: a hand-back is stored once per task; a second one
// while the first is pending gets ErrPendingSchedule.
func TestStoreHandBack(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	_, js := testutil.JetStream(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "SCHED", Subjects: []string{"sched.>", "task.>"},
		AllowMsgSchedules: true}); err != nil {
		t.Fatal(err)
	}
	b := func(seq uint64) *taskmsg.HandBack {
		return &taskmsg.HandBack{Subject: "sched.t1", Target: "task.t", ID: "t1", Sequence: seq,
			Due: time.Now().Add(time.Hour), Header: nats.Header{}, Data: []byte("{}"), Since: time.Now(), Refusals: 1}
	}
	if err := fleet.StoreHandBack(ctx, js, "SCHED", b(1)); err != nil {
		t.Fatal(err)
	}
	if err := fleet.StoreHandBack(ctx, js, "SCHED", b(2)); !errors.Is(err, fleet.ErrPendingSchedule) {
		t.Fatalf("second hand-back: %v, want ErrPendingSchedule", err)
	}
	if err := fleet.StoreHandBack(ctx, js, "OTHER", b(3)); err == nil || errors.Is(err, fleet.ErrPendingSchedule) {
		t.Fatalf("hand-back to the wrong stream: %v", err)
	}
}
