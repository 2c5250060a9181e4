package taskmsg

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func registeredSchedule() *nats.Msg {
	msg, _ := BuildSchedule(Schedule{Name: "daily", Subject: "jetflow.cron.daily", Spec: "0 30 2 * * *", Zone: "Europe/Paris",
		Target: "jetflow.fired.normal.reports.build", Encoding: "raw", Data: []byte("payload"), Headers: map[string]string{"Tenant": "acme"}})
	// What a direct get returns: the server appends its own headers.
	msg.Header.Set(jetstream.MsgRollup, "sub")
	msg.Header.Set("Nats-Sequence", "7")
	return msg
}

// taskTarget accepts the staging subjects of the default prefix.
func taskTarget(s string) bool { return strings.HasPrefix(s, "jetflow.fired.") }

func TestCronProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(*nats.Msg)
		want   string // part of the reason; "" for none
	}{
		{"as registered", func(*nats.Msg) {}, ""},
		{"a publish acknowledgement", func(m *nats.Msg) {
			m.Header = nats.Header{"Nats-Sequence": {"8"}}
			m.Data = []byte(`{"stream":"JETFLOW_TASKS","seq":1}`)
		}, `not a schedule (no Nats-Schedule header; 34 bytes: "{\"stream\":\"JETFLOW_TASKS\",\"seq\":1}")`},
		{"binary and long junk is quoted and cut", func(m *nats.Msg) {
			m.Header = nil
			m.Data = []byte("\x1b]0;owned\x07" + strings.Repeat("é", 100))
		}, `"\x1b]0;owned\a\u00e9`},
		{"no name", func(m *nats.Msg) { m.Header.Del(HeaderSchedule) }, "no Jetflow-Schedule header"},
		{"another name", func(m *nats.Msg) { m.Header.Set(HeaderSchedule, "nightly") }, `names "nightly"`},
		{"no fingerprint", func(m *nats.Msg) { m.Header.Del(HeaderScheduleHash) }, "no Jetflow-Schedule-Hash header"},
		{"payload changed", func(m *nats.Msg) { m.Data = []byte("other") }, "does not match its Jetflow-Schedule-Hash"},
		{"target changed", func(m *nats.Msg) {
			m.Header.Set(jetstream.ScheduleTargetHeader, "jetflow.fired.critical.payments.refund")
		}, "does not match"},
		{"spec changed everywhere", func(m *nats.Msg) {
			m.Header.Set(jetstream.ScheduleHeader, "@every 1s")
			m.Header.Set(HeaderScheduleSpec, "@every 1s")
		}, "does not match"},
		{"spec headers disagree", func(m *nats.Msg) { m.Header.Set(jetstream.ScheduleHeader, "@hourly") }, "Jetflow-Schedule-Spec"},
		{"zone headers disagree", func(m *nats.Msg) { m.Header.Set(HeaderScheduleZone, "UTC") }, "Jetflow-Schedule-Zone"},
		{"spec jetflow cannot parse", func(m *nats.Msg) {
			m.Header.Set(jetstream.ScheduleHeader, "@at 2030-01-01T00:00:00Z")
			m.Header.Set(HeaderScheduleSpec, "@at 2030-01-01T00:00:00Z")
		}, "does not parse"},
		{"target no task subject", func(m *nats.Msg) {
			_, hash := BuildSchedule(Schedule{Spec: "0 30 2 * * *", Zone: "Europe/Paris", Target: "elsewhere", Encoding: "raw",
				Data: []byte("payload"), Headers: map[string]string{"Tenant": "acme"}})
			m.Header.Set(jetstream.ScheduleTargetHeader, "elsewhere")
			m.Header.Set(HeaderScheduleHash, hash)
		}, `its target "elsewhere" is not a task subject`},
		{"custom header added", func(m *nats.Msg) { m.Header.Set("X-Extra", "1") }, "does not match"},
		{"custom header doubled", func(m *nats.Msg) { m.Header.Add("Tenant", "other") }, `header "Tenant" has 2 values`},
		{"encoding changed", func(m *nats.Msg) { m.Header.Del(HeaderEncoding) }, "does not match"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := registeredSchedule()
			tc.change(m)
			got := CronProblem("daily", m.Header, m.Data, taskTarget)
			if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
				t.Errorf("CronProblem = %q, want %q in it", got, tc.want)
			}
		})
	}
}

func TestDelayedProblem(t *testing.T) {
	t.Parallel()
	sched := nats.Header{jetstream.ScheduleHeader: {"@at 2030-01-01T00:00:00Z"}}
	if got := DelayedProblem(sched, []byte("x")); got != "" {
		t.Errorf("a schedule: %q", got)
	}
	if got := DelayedProblem(nats.Header{"Nats-Sequence": {"3"}}, []byte("{}")); !strings.Contains(got, `2 bytes: "{}"`) {
		t.Errorf("a plain message: %q", got)
	}
}

// FuzzCronProblem checks that any stored message gets an answer, and that a
// reason is printable ASCII of bounded size whatever the message holds.
func FuzzCronProblem(f *testing.F) {
	m := registeredSchedule()
	f.Add("daily", m.Header.Get(jetstream.ScheduleHeader), m.Header.Get(HeaderSchedule), m.Header.Get(HeaderScheduleHash), m.Data)
	f.Add("daily", "", "", "", []byte(`{"stream":"JETFLOW_TASKS","seq":1}`))
	f.Add("x", "@every 1s", "\x00\xff", "h", []byte("\xff\xfe"))
	f.Fuzz(func(t *testing.T, name, spec, schedName, hash string, data []byte) {
		h := nats.Header{}
		for k, vs := range m.Header {
			h[k] = append([]string(nil), vs...)
		}
		h.Set(jetstream.ScheduleHeader, spec)
		h.Set(HeaderScheduleSpec, spec)
		h.Set(HeaderSchedule, schedName)
		h.Set(HeaderScheduleHash, hash)
		got := CronProblem(name, h, data, taskTarget)
		if len(got) > 1024 {
			t.Fatalf("reason of %d bytes", len(got))
		}
		for _, c := range []byte(got) {
			if c < ' ' || c > '~' {
				t.Fatalf("reason %q has byte %#x", got, c)
			}
		}
	})
}
