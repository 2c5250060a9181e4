package taskmsg

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestIDSourceOf(t *testing.T) {
	t.Parallel()
	stamp := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		h      nats.Header
		header string
		value  string
	}{
		{"none", nil, "", ""},
		{"own ID first", nats.Header{HeaderTaskID: {"a"}, jetstream.MsgIDHeader: {"a"}}, HeaderTaskID, "a"},
		{"message ID", nats.Header{jetstream.MsgIDHeader: {"b"}}, jetstream.MsgIDHeader, "b"},
		{"unvalidated", nats.Header{HeaderTaskID: {"a b\r\n"}}, HeaderTaskID, "a b\r\n"},
		{"schedule name without the server's header", nats.Header{HeaderSchedule: {"daily"}}, "", ""},
	}
	for _, tc := range tests {
		src := IDSourceOf(tc.h, stamp)
		if src.Header != tc.header || src.Value != tc.value || (tc.header != "" && src.ID != tc.value) {
			t.Errorf("%s: IDSourceOf = %+v, want header %q value %q", tc.name, src, tc.header, tc.value)
		}
	}
	fired := nats.Header{HeaderSchedule: {"daily"}, HeaderScheduler: {"x"}}
	src := IDSourceOf(fired, stamp)
	if f, _ := FireOf(fired, stamp); src.Header != HeaderSchedule || src.Value != "daily" || src.ID != CronID("daily", f.Time) {
		t.Errorf("fired: IDSourceOf = %+v, want the tick's cron ID", src)
	}
}

func TestIdentityProblem(t *testing.T) {
	t.Parallel()
	stamp := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name    string
		h       nats.Header
		problem bool
	}{
		{"message ID only", nats.Header{jetstream.MsgIDHeader: {"a"}}, false},
		{"both equal", nats.Header{HeaderTaskID: {"a"}, jetstream.MsgIDHeader: {"a"}}, false},
		{"another task's ID", nats.Header{HeaderTaskID: {"victim"}, jetstream.MsgIDHeader: {"fresh"}}, true},
		{"task ID without message ID", nats.Header{HeaderTaskID: {"victim"}}, true},
		{"replay-looking pair", nats.Header{HeaderTaskID: {"victim"}, jetstream.MsgIDHeader: {"replay-JETFLOW_DLQ-3-00"},
			"Jetflow-Replayed-From-Seq": {"3"}}, true},
		{"cron tick ID", nats.Header{HeaderTaskID: {"cron-daily-20261130T120000Z"}, jetstream.MsgIDHeader: {"cron-daily-20261130T120000Z"}}, true},
		{"cron prefix as message ID", nats.Header{jetstream.MsgIDHeader: {"cron-x"}}, true},
		{"fired delayed task", nats.Header{HeaderTaskID: {"a"}, HeaderScheduler: {"jetflow.sched.a"}}, false},
		{"fired with another message ID", nats.Header{HeaderTaskID: {"a"}, jetstream.MsgIDHeader: {"b"}, HeaderScheduler: {"jetflow.cron.r"}}, false},
		{"fired cron ID", nats.Header{HeaderTaskID: {"cron-a-20261130T120000Z"}, HeaderScheduler: {"jetflow.cron.r"}}, false},
		{"tick", nats.Header{HeaderSchedule: {"daily"}, HeaderScheduler: {"jetflow.cron.daily"}}, false},
	}
	for _, tc := range tests {
		src := IDSourceOf(tc.h, stamp)
		if (src.Problem != "") != tc.problem {
			t.Errorf("%s: IDSourceOf = %+v, want a problem: %v", tc.name, src, tc.problem)
		}
		if got := ID(tc.h, 9, stamp); tc.problem && got != SeqID(9) {
			t.Errorf("%s: ID = %q, want %q", tc.name, got, SeqID(9))
		}
	}
}

// FuzzIdentity checks the identity rules on any pair of ID headers: a task
// no schedule fired is given an ID only when that ID is its message ID and
// not a cron tick's, and a problem quotes values in ASCII, cut short.
func FuzzIdentity(f *testing.F) {
	f.Add("a", "a", false)
	f.Add("victim", "fresh", false)
	f.Add("", "cron-x", false)
	f.Add("cron-x", "", true)
	f.Add("a\r\nb", strings.Repeat("x", 5000), false)
	stamp := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, own, msgID string, fired bool) {
		h := nats.Header{}
		if own != "" {
			h[HeaderTaskID] = []string{own}
		}
		if msgID != "" {
			h[jetstream.MsgIDHeader] = []string{msgID}
		}
		if fired {
			h[HeaderScheduler] = []string{"jetflow.sched.x"}
		}
		src := IDSourceOf(h, stamp)
		if len(src.Problem) > 400 {
			t.Fatalf("problem of %d bytes", len(src.Problem))
		}
		for i := 0; i < len(src.Problem); i++ {
			if c := src.Problem[i]; c < ' ' || c > '~' {
				t.Fatalf("problem %q has byte %#x", src.Problem, c)
			}
		}
		id := ID(h, 5, stamp)
		if id == SeqID(5) {
			return
		}
		if !SafeID(id) {
			t.Fatalf("ID %q is not safe", id)
		}
		if !fired && (id != msgID || strings.HasPrefix(id, CronIDPrefix)) {
			t.Fatalf("unfired task with Jetflow-Id %q, Nats-Msg-Id %q got ID %q", own, msgID, id)
		}
	})
}
