package enqueue

import (
	"errors"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/natserr"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/unique"
	"github.com/jetflow-io/jetflow/streams"
)

// typedArgs names its task type, as framework.TaskArgs do.
type typedArgs struct{ typ string }

func (a typedArgs) TaskType() string { return a.typ }

// versionedArgs names its payload version, as framework.VersionedArgs do.
type versionedArgs struct{ V int }

func (a versionedArgs) PayloadVersion() int { return a.V }

func TestBuildErrors(t *testing.T) {
	t.Parallel()
	at := func(t time.Time) option { return func(c *Config) error { c.At = t; return nil } }
	set := func(f func(*Config)) option { return func(c *Config) error { f(c); return nil } }
	boom := errors.New("boom")
	cases := []struct {
		name     string
		taskType string
		payload  any
		opts     []option
		noDedup  bool
		max      int64
		want     []error
	}{
		{name: "invalid task type", taskType: "Bad Type", want: []error{streams.ErrInvalidTaskType}},
		{name: "payload of another type", payload: typedArgs{"other"}, want: []error{errInvalid}},
		{name: "option error", opts: []option{func(*Config) error { return boom }}, want: []error{boom}},
		{name: "payload does not encode", payload: func() {}, want: []error{ErrEncode}},
		{name: "due after the last schedule", opts: []option{at(taskmsg.MaxDue.Add(time.Hour))}, want: []error{errInvalid}},
		{name: "unique key without a period", opts: []option{set(func(c *Config) { c.Unique.HasKey, c.Unique.Key = true, "k" })}, want: []error{errInvalid}},
		{name: "until done without a period", opts: []option{set(func(c *Config) { c.Unique.UntilDone = true })}, want: []error{errInvalid}},
		{name: "unique without an ID", noDedup: true, opts: []option{set(func(c *Config) { c.Unique.Period = time.Minute })}, want: []error{errInvalid}},
		{name: "payload names an invalid version", payload: versionedArgs{0}, want: []error{errInvalid}},
		{name: "ordered with a priority", opts: []option{set(func(c *Config) { c.OrderingKey, c.Priority = "k", streams.PriorityHigh })}, want: []error{ErrOrdering, errInvalid}},
		{name: "ordered and delayed", opts: []option{set(func(c *Config) { c.OrderingKey, c.Delay = "k", time.Hour })}, want: []error{ErrOrdering, errInvalid}},
		{name: "too large", payload: "a payload longer than the limit", max: 16, want: []error{natserr.ErrPayloadTooLarge}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBuilder()
			b.NoDedup = tc.noDedup
			if tc.max != 0 {
				b.MaxPayload = func() int64 { return tc.max }
			}
			typ := tc.taskType
			if typ == "" {
				typ = "t.a"
			}
			msg, _, err := BuildTask(b, typ, tc.payload, tc.opts, nil, streams.Layout{Partitions: 1, Ordered: 1})
			if err == nil {
				t.Fatalf("build = %v, want an error", msg)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Errorf("build error %v, want it to wrap %v", err, w)
				}
			}
		})
	}
}

func TestBuild(t *testing.T) {
	t.Parallel()
	names := streams.MustNames("")
	one := streams.Layout{Partitions: 1, Ordered: 1}
	four := streams.Layout{Partitions: 4, Ordered: 4}
	set := func(f func(*Config)) option { return func(c *Config) error { f(c); return nil } }
	withID := set(func(c *Config) { c.ID = "task-1" })
	cases := []struct {
		name    string
		payload any
		opts    []option
		layout  streams.Layout
		noDedup bool
		// subject returns the subject wanted for the built ID.
		subject func(id string) string
		header  map[string]string // headers wanted ("" : absent)
		noID    bool              // built without an ID
		delayed bool
	}{
		{name: "immediate", layout: one,
			subject: func(string) string { return names.TaskSubject(streams.PriorityNormal, "t.a") }},
		{name: "priority", layout: one, opts: []option{set(func(c *Config) { c.Priority = streams.PriorityCritical })},
			subject: func(string) string { return names.TaskSubject(streams.PriorityCritical, "t.a") }},
		{name: "anonymous without dedup", layout: one, noDedup: true, noID: true,
			header:  map[string]string{jetstream.MsgIDHeader: ""},
			subject: func(string) string { return names.TaskSubject(streams.PriorityNormal, "t.a") }},
		{name: "caller's ID without dedup", layout: one, noDedup: true, opts: []option{withID},
			header:  map[string]string{jetstream.MsgIDHeader: "task-1"},
			subject: func(string) string { return names.TaskSubject(streams.PriorityNormal, "t.a") }},
		{name: "partitions give an ID without dedup", layout: four, noDedup: true,
			subject: func(id string) string {
				return names.Partition(four.TaskPartition(id)).TaskSubject(streams.PriorityNormal, "t.a")
			}},
		{name: "delayed", layout: one, delayed: true, opts: []option{set(func(c *Config) { c.Delay = time.Hour })},
			header:  map[string]string{taskmsg.HeaderScheduleTarget: names.FiredSubject(streams.PriorityNormal, "t.a")},
			subject: names.DelaySubject},
		{name: "delayed without dedup keeps an ID", layout: one, noDedup: true, delayed: true,
			opts:    []option{set(func(c *Config) { c.At = time.Now().Add(time.Hour) })},
			subject: names.DelaySubject},
		{name: "due in the past is immediate", layout: one, opts: []option{set(func(c *Config) { c.At = time.Now().Add(-time.Hour) })},
			subject: func(string) string { return names.TaskSubject(streams.PriorityNormal, "t.a") }},
		{name: "ordered", layout: one, opts: []option{set(func(c *Config) { c.OrderingKey = "order-7" })},
			header: map[string]string{ordering.HeaderKey: "order-7"},
			subject: func(string) string {
				return names.OrderedSubject("t.a", ordering.Slot("order-7", streamdefs.OrderedSlots))
			}},
		{name: "version option", layout: one, payload: versionedArgs{2}, opts: []option{set(func(c *Config) { c.Version = 5 })},
			header:  map[string]string{fleet.HeaderPayloadVersion: "5"},
			subject: func(string) string { return names.TaskSubject(streams.PriorityNormal, "t.a") }},
		{name: "payload version", layout: one, payload: versionedArgs{2},
			header:  map[string]string{fleet.HeaderPayloadVersion: "2"},
			subject: func(string) string { return names.TaskSubject(streams.PriorityNormal, "t.a") }},
		{name: "unique", layout: one, opts: []option{set(func(c *Config) { c.Unique = unique.Spec{Period: time.Minute, UntilDone: true} })},
			header:  map[string]string{unique.HeaderRevision: "0"},
			subject: func(string) string { return names.TaskSubject(streams.PriorityNormal, "t.a") }},
		{name: "payload of its own type", layout: one, payload: typedArgs{"t.a"},
			subject: func(string) string { return names.TaskSubject(streams.PriorityNormal, "t.a") }},
		{name: "caller's ID in a partition", layout: four, opts: []option{withID},
			header: map[string]string{jetstream.MsgIDHeader: "task-1"},
			subject: func(string) string {
				return names.Partition(four.TaskPartition("task-1")).TaskSubject(streams.PriorityNormal, "t.a")
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := newBuilder()
			b.NoDedup = tc.noDedup
			b.MaxPayload = func() int64 { return 1 << 20 }
			msg, built, err := BuildTask(b, "t.a", tc.payload, tc.opts, nil, tc.layout)
			if err != nil {
				t.Fatal(err)
			}
			if (built.ID == "") != tc.noID {
				t.Errorf("built ID %q, want none: %v", built.ID, tc.noID)
			}
			if want := tc.subject(built.ID); msg.Subject != want {
				t.Errorf("subject %s, want %s", msg.Subject, want)
			}
			if (!built.Due.IsZero()) != tc.delayed {
				t.Errorf("due %v, want delayed: %v", built.Due, tc.delayed)
			}
			if !tc.noID && msg.Header.Get(jetstream.MsgIDHeader) != built.ID {
				t.Errorf("Nats-Msg-Id %q, want %q", msg.Header.Get(jetstream.MsgIDHeader), built.ID)
			}
			for k, v := range tc.header {
				if got := msg.Header.Get(k); got != v {
					t.Errorf("header %s = %q, want %q", k, got, v)
				}
			}
		})
	}
}

// The caller's header map is never written: the version, ordering and
// unique headers go to a copy.
func TestBuildLeavesCallersHeaders(t *testing.T) {
	t.Parallel()
	for _, extra := range []option{
		func(c *Config) error { c.Version = 3; return nil },
		func(c *Config) error { c.OrderingKey = "k"; return nil },
		func(c *Config) error { c.Unique.Period = time.Minute; return nil },
	} {
		mine := map[string]string{"X-Mine": "1"}
		opts := []option{func(c *Config) error { c.Headers = mine; return nil }, extra}
		msg, _, err := BuildTask(newBuilder(), "t.a", nil, opts, nil, streams.Layout{Partitions: 1, Ordered: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(mine) != 1 || msg.Header.Get("X-Mine") != "1" || len(msg.Header) < 3 {
			t.Errorf("caller's headers %v, message headers %v; want the caller's untouched and copied", mine, msg.Header)
		}
	}
}

func TestSubjects(t *testing.T) {
	t.Parallel()
	names := streams.MustNames("")
	for _, tc := range []struct {
		name  string
		batch Subjects // nil: the builder's own
		held  func(b *Builder, s Subjects) int
	}{
		{"builder", nil, func(b *Builder, _ Subjects) int { return len(mapOf(b.subjects.Load())) }},
		{"batch", make(Subjects), func(_ *Builder, s Subjects) int { return len(s) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuilder()
			first := b.subject(tc.batch, names, streams.PriorityHigh, "t.a")
			again := b.subject(tc.batch, names, streams.PriorityHigh, "t.a")
			if first != names.TaskSubject(streams.PriorityHigh, "t.a") || unsafe.StringData(first) != unsafe.StringData(again) {
				t.Errorf("%s then %s: want %s, one shared string", first, again, names.TaskSubject(streams.PriorityHigh, "t.a"))
			}
			if p := b.subject(tc.batch, names.Partition(2), streams.PriorityHigh, "t.a"); p != names.Partition(2).TaskSubject(streams.PriorityHigh, "t.a") {
				t.Errorf("partition 2 gave %s", p)
			}
			for i := range 2 * maxInternedSubjects {
				typ := "t.n" + string(rune('a'+i%26)) + string(rune('a'+i/26))
				if got := b.subject(tc.batch, names, streams.PriorityNormal, typ); got != names.TaskSubject(streams.PriorityNormal, typ) {
					t.Fatalf("subject of %s: %s", typ, got)
				}
			}
			if n := tc.held(b, tc.batch); n != maxInternedSubjects {
				t.Errorf("%d subjects interned, want at most %d", n, maxInternedSubjects)
			}
		})
	}
}

// BenchmarkBuild measures the build of an immediate task without options,
// the path of most enqueues: its allocations are the figure to watch.
func BenchmarkBuild(b *testing.B) {
	bl := newBuilder()
	bl.MaxPayload = func() int64 { return 1 << 20 }
	payload := []byte(`{"order":12345}`)
	l := streams.Layout{Partitions: 1, Ordered: 1}
	b.ReportAllocs()
	var msg *nats.Msg
	for b.Loop() {
		var err error
		if msg, _, err = BuildTask[option](bl, "bench", payload, nil, nil, l); err != nil {
			b.Fatal(err)
		}
	}
	_ = msg
}

// The server's limit is read for the first message and for one larger
// than the last limit read, not for every message (each read takes the
// connection's lock); a raised limit lets a larger message through, a
// message over it is refused.
func TestBuildReadsTheLimitOnlyWhenNeeded(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	limit, reads := int64(200), 0
	b.MaxPayload = func() int64 { reads++; return limit }
	build := func(payload string) error {
		_, _, err := BuildTask[option](b, "t.a", payload, nil, nil, streams.Layout{Partitions: 1, Ordered: 1})
		return err
	}
	for range 3 {
		if err := build("small"); err != nil {
			t.Fatal(err)
		}
	}
	if reads != 1 {
		t.Fatalf("the limit was read %d times for 3 small messages, want once", reads)
	}
	large := string(make([]byte, 300))
	if err := build(large); !errors.Is(err, natserr.ErrPayloadTooLarge) {
		t.Fatalf("a message over the limit: %v, want ErrPayloadTooLarge", err)
	}
	if reads != 2 {
		t.Fatalf("the limit was read %d times, want again for the larger message", reads)
	}
	limit = 1 << 20 // the server now accepts more
	if err := build(large); err != nil {
		t.Fatalf("a message within the raised limit: %v", err)
	}
	if err := build("small"); err != nil || reads != 3 {
		t.Fatalf("small message after the raise: %v, %d reads (want 3)", err, reads)
	}
}

// TestBuildLeavesTheSharedConfig: an enqueue without options builds from
// the one zero Config that Options shares, so Build must only read it.
func TestBuildLeavesTheSharedConfig(t *testing.T) {
	t.Parallel()
	b := newBuilder()
	for _, l := range []streams.Layout{{Partitions: 1, Ordered: 1}, {Partitions: 4, Ordered: 1}} {
		if _, _, err := BuildTask[option](b, "t.a", map[string]int{"n": 1}, nil, nil, l); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(noOptions, Config{}) {
		t.Errorf("the shared Config became %+v", noOptions)
	}
}
