package fleet_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

var rules = fleet.Rules{
	TaskType: streams.ValidateTaskType,
	Priority: func(s string) error { _, err := streams.ParsePriority(s); return err },
}

func record(id string) fleet.Record {
	return fleet.Record{ID: id, Host: "h1", PID: 42, Version: "app@v1", Concurrency: 4, Busy: 1,
		Types:   []fleet.Serves{{Type: "mail.send", Priorities: []string{"high", "normal"}, Concurrency: 4}},
		Started: time.Date(2026, 12, 4, 7, 0, 0, 0, time.UTC), TTLSeconds: 3}
}

// A record round-trips; one that breaks a rule is refused when written and
// when read, whatever field breaks it.
func TestRecordRules(t *testing.T) {
	t.Parallel()
	good := record("w1")
	b, err := rules.Encode(&good)
	if err != nil {
		t.Fatal(err)
	}
	got, err := rules.Decode("w1", b)
	if err != nil || got.Host != "h1" || got.Types[0].Priorities[1] != "normal" {
		t.Fatalf("Decode = %+v, %v", got, err)
	}
	laned := record("w1")
	laned.Lanes = []fleet.Lane{{Type: "mail.send", Partition: 1, Lane: 15, Lanes: 16, Pin: "pin1", Running: 2, Queued: 1, Keys: 2,
		Busiest: []fleet.LaneKey{{Key: "acct 7", Running: 1, Queued: 1}, {Key: "acct 9", Running: 1}}}}
	if b, err := rules.Encode(&laned); err != nil {
		t.Errorf("a record with a lane: %v", err)
	} else if got, err := rules.Decode("w1", b); err != nil || len(got.Lanes) != 1 || !reflect.DeepEqual(got.Lanes[0], laned.Lanes[0]) {
		t.Errorf("a record with a lane decodes as %+v, %v", got, err)
	}
	if _, err := rules.Decode("w2", b); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("record under another key: %v", err)
	}
	cases := map[string]func(*fleet.Record){
		"id with dot":      func(r *fleet.Record) { r.ID = "a.b" },
		"empty id":         func(r *fleet.Record) { r.ID = "" },
		"long id":          func(r *fleet.Record) { r.ID = strings.Repeat("a", fleet.MaxIDLen+1) },
		"escape in host":   func(r *fleet.Record) { r.Host = "h\x1b[2J" },
		"C1 in version":    func(r *fleet.Record) { r.Version = "v\u009b1" },
		"long version":     func(r *fleet.Record) { r.Version = strings.Repeat("v", fleet.MaxTextLen+1) },
		"bad utf8":         func(r *fleet.Record) { r.Host = "\xff" },
		"busy over slots":  func(r *fleet.Record) { r.Busy = 5 },
		"negative pid":     func(r *fleet.Record) { r.PID = -1 },
		"no ttl":           func(r *fleet.Record) { r.TTLSeconds = 0 },
		"bad type":         func(r *fleet.Record) { r.Types[0].Type = "Mail>" },
		"bad priority":     func(r *fleet.Record) { r.Types[0].Priorities = []string{"urgent"} },
		"no priority":      func(r *fleet.Record) { r.Types[0].Priorities = nil },
		"too many types":   func(r *fleet.Record) { r.Types = make([]fleet.Serves, fleet.MaxTypes+1) },
		"negative type cc": func(r *fleet.Record) { r.Types[0].Concurrency = -1 },
		"lane type":        func(r *fleet.Record) { r.Lanes[0].Type = "a b" },
		"lane past lanes":  func(r *fleet.Record) { r.Lanes[0].Lane = 16 },
		"negative lane":    func(r *fleet.Record) { r.Lanes[0].Lane = -1 },
		"too many lanes":   func(r *fleet.Record) { r.Lanes[0].Lanes, r.Lanes[0].Lane = fleet.MaxLaneCount+1, 0 },
		"negative part":    func(r *fleet.Record) { r.Lanes[0].Partition = -1 },
		"no pin":           func(r *fleet.Record) { r.Lanes[0].Pin = "" },
		"escape in pin":    func(r *fleet.Record) { r.Lanes[0].Pin = "p\x1b" },
		"long pin":         func(r *fleet.Record) { r.Lanes[0].Pin = strings.Repeat("p", fleet.MaxPinLen+1) },
		"negative queued":  func(r *fleet.Record) { r.Lanes[0].Queued = -1 },
		"negative running": func(r *fleet.Record) { r.Lanes[0].Running = -1 },
		"lanes listed":     func(r *fleet.Record) { r.Lanes = make([]fleet.Lane, fleet.MaxLanes+1) },
		"empty lane key":   func(r *fleet.Record) { r.Lanes[0].Busiest = []fleet.LaneKey{{Key: ""}} },
		"escape in key":    func(r *fleet.Record) { r.Lanes[0].Busiest = []fleet.LaneKey{{Key: "a\x1b[2J"}} },
		"negative key run": func(r *fleet.Record) { r.Lanes[0].Busiest = []fleet.LaneKey{{Key: "a", Running: -1}} },
		"lane keys listed": func(r *fleet.Record) { r.Lanes[0].Busiest = make([]fleet.LaneKey, fleet.MaxLaneKeys+1) },
	}
	for name, breakIt := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := record("w1")
			r.Types = append([]fleet.Serves(nil), r.Types...)
			r.Lanes = []fleet.Lane{{Type: "mail.send", Lane: 3, Lanes: 16, Pin: "pin1", Open: true, Running: 2, Queued: 1, Keys: 2}}
			breakIt(&r)
			if _, err := rules.Encode(&r); !errors.Is(err, fleet.ErrInvalid) {
				t.Errorf("Encode: %v, want ErrInvalid", err)
			}
			if name == "bad utf8" {
				return // encoding/json decodes invalid UTF-8 as U+FFFD
			}
			raw := []byte(`{"id":"` + r.ID + `"}`)
			if b, err := jsonOf(r); err == nil {
				raw = b
			}
			if _, err := rules.Decode(r.ID, raw); !errors.Is(err, fleet.ErrInvalid) {
				t.Errorf("Decode: %v, want ErrInvalid", err)
			}
		})
	}
	if _, err := rules.Decode("w1", []byte("{")); !errors.Is(err, fleet.ErrInvalid) {
		t.Errorf("truncated JSON: %v", err)
	}
}

// A record's TTL is three intervals in whole seconds.
func TestTTL(t *testing.T) {
	t.Parallel()
	for in, want := range map[time.Duration]time.Duration{
		time.Second: 3 * time.Second, 5 * time.Second: 15 * time.Second, 1500 * time.Millisecond: 5 * time.Second,
	} {
		if got := fleet.TTL(in); got != want {
			t.Errorf("TTL(%v) = %v, want %v", in, got, want)
		}
	}
}

// An announcer's record is listed while it runs and gone at once when it
// stops; a record that is not written again expires with its TTL; records
// another tool wrote are counted as invalid, not listed.
func TestAnnounceListExpire(t *testing.T) {
	t.Parallel()
	s := testutil.RunServer(t)
	_, js := testutil.JetStream(t, s)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	const bucket = "JETFLOW_WORKERS"
	if _, err := rules.List(ctx, js, bucket); !errors.Is(err, fleet.ErrNoRegistry) {
		t.Fatalf("List before the bucket exists: %v", err)
	}
	if err := fleet.EnsureBucket(ctx, js, bucket, "JETFLOW_TASKS"); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, "forged", []byte(`{"id":"forged","host":"\u001b[31m"}`)); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	announce := func(id string) context.CancelFunc {
		actx, acancel := context.WithCancel(ctx)
		done := make(chan struct{})
		a := &fleet.Announcer{JS: js, Bucket: bucket, Interval: time.Second, Rules: rules, Log: log,
			Snapshot: func() fleet.Record { return record(id) }}
		go func() { defer close(done); a.Run(actx) }()
		return func() { acancel(); <-done }
	}
	stop1 := announce("w1")
	stop2 := announce("w2")
	defer stop2()
	l := waitList(t, js, bucket, func(l *fleet.Listing) bool { return len(l.Records) == 2 })
	if l.Invalid != 1 || l.Records[0].TTLSeconds != 3 || l.Records[0].Heartbeat.IsZero() {
		t.Errorf("listing %+v", l)
	}
	stop1()
	l, err = rules.List(ctx, js, bucket)
	if err != nil || len(l.Records) != 1 || l.Records[0].ID != "w2" {
		t.Fatalf("after w1 stopped: %+v, %v", l, err)
	}

	// An announcer whose connection dies (a killed worker) cannot delete
	// its record: the record expires with its TTL.
	deadNC, deadJS := testutil.JetStream(t, s)
	dctx, dcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	dead := &fleet.Announcer{JS: deadJS, Bucket: bucket, Interval: time.Second, Rules: rules, Log: log,
		Snapshot: func() fleet.Record { return record("dead") }}
	go func() { defer close(done); dead.Run(dctx) }()
	waitList(t, js, bucket, func(l *fleet.Listing) bool {
		return slices.ContainsFunc(l.Records, func(r fleet.Record) bool { return r.ID == "dead" })
	})
	deadNC.Close()
	killed := time.Now()
	dcancel()
	<-done
	waitList(t, js, bucket, func(l *fleet.Listing) bool {
		return !slices.ContainsFunc(l.Records, func(r fleet.Record) bool { return r.ID == "dead" })
	})
	t.Logf("record with a 3 s TTL gone %v after its announcer's connection closed", time.Since(killed).Round(10*time.Millisecond))
}

// waitList lists the bucket until ok holds, for up to 30 s.
func waitList(t *testing.T, js jetstream.JetStream, bucket string, ok func(*fleet.Listing) bool) *fleet.Listing {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		l, err := rules.List(ctx, js, bucket)
		cancel()
		if err == nil && ok(l) {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("listing never as wanted: %+v, %v", l, err)
		}
		<-tick.C
	}
}

func jsonOf(r fleet.Record) ([]byte, error) { return json.Marshal(r) }

// FitLanes keeps a record's lanes within their budget, dropping keys first
// and lanes next, so that a worker holding many lanes of long keys still
// writes its record.
func TestFitLanes(t *testing.T) {
	t.Parallel()
	key := strings.Repeat("<", 256) // six bytes each in JSON
	var lanes []fleet.Lane
	for l := range 256 {
		ln := fleet.Lane{Type: "mail.send", Lane: l, Lanes: 256, Pin: "pin1", Running: 8, Keys: 8}
		for range fleet.MaxLaneKeys {
			ln.Busiest = append(ln.Busiest, fleet.LaneKey{Key: key, Running: 1})
		}
		lanes = append(lanes, ln)
	}
	rec := record("w1")
	rec.Lanes = lanes
	if _, err := rules.Encode(&rec); !errors.Is(err, fleet.ErrInvalid) {
		t.Fatalf("a record of 256 lanes with their keys: %v, want it too big", err)
	}
	const budget = 24 << 10
	rec.Lanes = fleet.FitLanes(lanes, budget)
	b, err := rules.Encode(&rec)
	if err != nil {
		t.Fatalf("fitted record: %v", err)
	}
	js, _ := json.Marshal(rec.Lanes)
	if len(js) > budget+2 || len(rec.Lanes) == 0 || len(rec.Lanes[0].Busiest) == 0 {
		t.Fatalf("%d lanes in %d bytes (record %d): want the first with keys, within %d", len(rec.Lanes), len(js), len(b), budget)
	}
	last := rec.Lanes[len(rec.Lanes)-1]
	if len(last.Busiest) != 0 {
		t.Errorf("the last lane kept its keys: %d", len(last.Busiest))
	}
	if got := fleet.FitLanes(lanes[:2], 2*budget); len(got) != 2 || len(got[1].Busiest) != fleet.MaxLaneKeys {
		t.Errorf("two lanes that fit: %+v", got)
	}
}
