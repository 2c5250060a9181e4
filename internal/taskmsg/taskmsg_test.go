package taskmsg

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestID(t *testing.T) {
	t.Parallel()
	stamp := time.Date(2026, 3, 1, 9, 0, 0, 300e6, time.UTC)
	next := stamp.Add(2 * time.Second).Truncate(time.Second)
	cases := []struct {
		name string
		h    nats.Header
		want string
	}{
		{"no headers", nil, "seq-7"},
		{"msg id", nats.Header{jetstream.MsgIDHeader: {"abc"}}, "abc"},
		{"task id equal to msg id", nats.Header{jetstream.MsgIDHeader: {"abc"}, HeaderTaskID: {"abc"}}, "abc"},
		{"task id differing from msg id", nats.Header{jetstream.MsgIDHeader: {"replay-1"}, HeaderTaskID: {"abc"}}, "seq-7"},
		{"task id without msg id", nats.Header{HeaderTaskID: {"abc"}}, "seq-7"},
		{"fired task id wins", nats.Header{HeaderScheduler: {"jetflow.sched.abc"}, HeaderTaskID: {"abc"}}, "abc"},
		{"cron id not fired", nats.Header{jetstream.MsgIDHeader: {"cron-n-20260301T090000Z"}}, "seq-7"},
		{"cron id fired", nats.Header{HeaderScheduler: {"jetflow.cron.r"}, HeaderTaskID: {"cron-n-20260301T090000Z"}}, "cron-n-20260301T090000Z"},
		{"cron every", nats.Header{HeaderSchedule: {"n"}, HeaderScheduler: {"jetflow.cron.n"},
			HeaderScheduleSpec: {"@every 2s"}, HeaderScheduleNext: {next.Format(time.RFC3339Nano)}},
			CronID("n", next.Add(-2*time.Second))},
		{"cron without next", nats.Header{HeaderSchedule: {"n"}, HeaderScheduler: {"jetflow.cron.n"}},
			"cron-n-20260301T090000Z"},
		{"schedule name without scheduler", nats.Header{HeaderSchedule: {"n"}}, "seq-7"},
		{"ambiguous zone falls back", nats.Header{HeaderSchedule: {"n"}, HeaderScheduler: {"x"},
			HeaderScheduleSpec: {"0 0 9 * * *"}, HeaderScheduleZone: {"Local"}, HeaderScheduleNext: {next.Format(time.RFC3339Nano)}},
			"cron-n-20260301T090000Z"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := ID(c.h, 7, stamp); got != c.want {
				t.Errorf("ID = %q, want %q", got, c.want)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	m, delayed := Build(Spec{Target: "jetflow.task.normal.a", ID: "x", Data: []byte("{}"), Now: now})
	if delayed || m.Subject != "jetflow.task.normal.a" || m.Header.Get(jetstream.MsgIDHeader) != "x" || len(m.Header) != 1 {
		t.Errorf("immediate: %v %+v", delayed, m)
	}
	m, _ = Build(Spec{Target: "t", Anonymous: true, Now: now})
	if m.Header != nil {
		t.Errorf("anonymous task without headers has a header block: %v", m.Header)
	}
	due := now.Add(1500 * time.Millisecond)
	m, delayed = Build(Spec{Target: "t", ID: "x", DelaySubject: "s", ScheduleTarget: "f", Due: due, Now: now, Encoding: "gob",
		Headers: map[string]string{"K": "v"}})
	if !delayed || m.Subject != "s" || m.Header.Get(HeaderScheduleTarget) != "f" ||
		m.Header.Get(jetstream.ScheduleHeader) != "" || m.Header.Get(HeaderTaskID) != "x" ||
		!ParseTime(m.Header.Get(HeaderScheduledFor)).Equal(due) || m.Header.Get(HeaderEncoding) != "gob" || m.Header.Get("K") != "v" {
		t.Errorf("delayed: %+v", m)
	}
	// The mover's schedule keeps the task's own headers, drops every
	// Nats- header the producer set, and sets the schedule's.
	h := m.Header
	h.Set("Nats-Rollup", "all")
	h.Set("nats-ttl", "1s")
	s := DelayedSchedule("sched.x", "fired.normal.t", "x", due, h, m.Data)
	if s.Subject != "sched.x" || s.Header.Get(jetstream.ScheduleTargetHeader) != "fired.normal.t" ||
		s.Header.Get(jetstream.ScheduleHeader) != "@at "+FormatTime(due) || s.Header.Get(jetstream.MsgIDHeader) != "x" ||
		s.Header.Get("Nats-Rollup") != "" || len(s.Header["nats-ttl"]) != 0 || s.Header.Get(HeaderScheduleTarget) != "" ||
		s.Header.Get("K") != "v" || s.Header.Get(HeaderEncoding) != "gob" {
		t.Errorf("schedule: %+v", s)
	}
	if got, want := Size(&nats.Msg{Data: []byte("12345"), Header: nats.Header{"Ab": {"cd"}}}), int64(5+12+2+2+4); got != want {
		t.Errorf("Size = %d, want %d", got, want)
	}
}

// IDs read from the wire that could not be task IDs (too long for a
// subject token, or with bytes no ID may have) never become the task's ID.
func TestIDFromWireIsSafe(t *testing.T) {
	for _, bad := range []string{strings.Repeat("a", MaxIDLen+1), "a b", "a.b", "*", ">", "x\r\ny"} {
		for _, k := range []string{HeaderTaskID, "Nats-Msg-Id"} {
			h := nats.Header{}
			h.Set(k, bad)
			if got := ID(h, 7, time.Time{}); got != "seq-7" {
				t.Errorf("ID with %s %q = %q, want seq-7", k, bad, got)
			}
		}
	}
	h := nats.Header{}
	h.Set(HeaderTaskID, strings.Repeat("a", MaxIDLen))
	h.Set("Nats-Msg-Id", strings.Repeat("a", MaxIDLen))
	if got := ID(h, 7, time.Time{}); got != strings.Repeat("a", MaxIDLen) {
		t.Errorf("valid ID replaced by %q", got)
	}
}

// BuildSized counts the size Size would count on the message it built,
// including custom headers that override its own.
func TestBuildSizedMatchesSize(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	specs := []Spec{
		{Target: "t", ID: "x", Data: []byte("{}"), Now: now},
		{Target: "t", Anonymous: true, Now: now},
		{Target: "t", Anonymous: true, Encoding: "gob", Data: []byte("abc"), Now: now},
		{Target: "t", ID: "an-id", Headers: map[string]string{"K": "v", "Other": "longer value"}, Now: now},
		{Target: "t", ID: "x", Headers: map[string]string{HeaderEncoding: "a much longer encoding name"}, Encoding: "gob", Now: now},
		{Target: "t", ID: "x", DelaySubject: "s", ScheduleTarget: "f", Due: now.Add(time.Hour), Now: now, Encoding: "gob",
			Headers: map[string]string{"K": "v", HeaderTaskID: "someone else"}, Data: []byte("payload")},
	}
	for i, s := range specs {
		m, size := BuildSized(&s)
		if want := Size(m); size != want {
			t.Errorf("spec %d: BuildSized counted %d bytes, Size counts %d (%v)", i, size, want, m.Header)
		}
	}
}
