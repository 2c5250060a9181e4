package taskmsg

import (
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
		{"own ID first", nats.Header{HeaderTaskID: {"a"}, jetstream.MsgIDHeader: {"b"}}, HeaderTaskID, "a"},
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
