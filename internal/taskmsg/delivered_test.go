package taskmsg

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// names is a deployment's schedule subjects under prefix "jetflow".
type names struct{}

func (names) ScheduleSubject(id string) string { return "jetflow.sched." + id }
func (names) CronSubject(name string) string   { return "jetflow.cron." + name }

// validID accepts what SafeID accepts, as streams.ValidateID does.
func validID(id string) error {
	if !SafeID(id) {
		return errors.New("invalid task ID")
	}
	return nil
}

func TestDeliveredID(t *testing.T) {
	t.Parallel()
	stamp := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	long := strings.Repeat("x", MaxIDLen+1)
	tests := []struct {
		name  string
		h     nats.Header
		names ScheduleNames
		id    string
		err   string // a part of the error, "" for none
	}{
		{"no ID header", nil, names{}, "seq-7", ""},
		{"message ID", nats.Header{jetstream.MsgIDHeader: {"a"}}, names{}, "a", ""},
		{"too long", nats.Header{HeaderTaskID: {long}, jetstream.MsgIDHeader: {long}}, names{},
			"seq-7", "header Jetflow-Id is 129 bytes"},
		{"invalid", nats.Header{jetstream.MsgIDHeader: {"a b"}}, names{}, "seq-7", "header Nats-Msg-Id: invalid task ID"},
		{"another task's ID", nats.Header{HeaderTaskID: {"victim"}, jetstream.MsgIDHeader: {"fresh"}}, names{},
			"seq-7", "differs from Nats-Msg-Id"},
		{"fired delayed task", nats.Header{HeaderTaskID: {"a"}, HeaderScheduler: {"jetflow.sched.a"}}, names{}, "a", ""},
		{"fired under another ID", nats.Header{HeaderTaskID: {"b"}, HeaderScheduler: {"jetflow.sched.a"}}, names{},
			"seq-7", `carries task ID "b"`},
		{"fired outside a worker", nats.Header{HeaderTaskID: {"b"}, HeaderScheduler: {"jetflow.sched.a"}}, nil, "b", ""},
		{"fired delayed task with a tick's ID", nats.Header{HeaderTaskID: {"cron-x"}, HeaderScheduler: {"jetflow.sched.cron-x"}}, names{},
			"seq-7", "reserved for the ticks"},
		{"tick", nats.Header{HeaderSchedule: {"daily"}, HeaderScheduler: {"jetflow.cron.daily"}}, names{},
			CronID("daily", stamp), ""},
		{"tick naming another schedule", nats.Header{HeaderTaskID: {"a"}, HeaderSchedule: {"other"}, HeaderScheduler: {"jetflow.cron.daily"}},
			names{}, "seq-7", `names schedule "other"`},
		{"foreign scheduler", nats.Header{HeaderTaskID: {"a"}, HeaderScheduler: {"other.sched.a"}}, names{},
			"seq-7", "not a schedule subject"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := DeliveredID(tc.h, 7, stamp, validID, tc.names)
			if id != tc.id {
				t.Errorf("ID = %q, want %q", id, tc.id)
			}
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("error = %v, want one with %q", err, tc.err)
			}
		})
	}
}

func TestDeliveredIDQuotesShort(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("y", 4096)
	_, err := DeliveredID(nats.Header{jetstream.MsgIDHeader: {long}}, 1, time.Time{}, validID, nil)
	if err == nil || len(err.Error()) > 200 {
		t.Fatalf("error = %v, want one quoting a short prefix", err)
	}
	if err := CheckFired(names{}, nats.Header{HeaderScheduler: {long}}); err == nil || len(err.Error()) > 300 {
		t.Fatalf("CheckFired error = %v, want one quoting a short prefix", err)
	}
}

func TestCheckDue(t *testing.T) {
	t.Parallel()
	stored := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		v      string
		stored time.Time
		err    string
	}{
		{"due now", FormatTime(stored), stored, ""},
		{"within the lead", FormatTime(stored.Add(MaxScheduleLead)), stored, ""},
		{"past", FormatTime(stored.Add(-time.Hour)), stored, ""},
		{"beyond the lead", FormatTime(stored.Add(MaxScheduleLead + time.Second)), stored, "a schedule never fires that early"},
		{"unknown store time", FormatTime(stored.Add(time.Hour)), time.Time{}, ""},
		{"not a time", "tomorrow", stored, "is not an RFC 3339 time"},
		{"long garbage", strings.Repeat("z", 1000), stored, "(1000 bytes)"},
	}
	for _, tc := range tests {
		err := CheckDue(tc.v, tc.stored)
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%s: CheckDue = %v, want an error with %q", tc.name, err, tc.err)
		}
		if err != nil && len(err.Error()) > 300 {
			t.Errorf("%s: error of %d bytes", tc.name, len(err.Error()))
		}
	}
}
