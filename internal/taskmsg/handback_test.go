package taskmsg

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestHandBackMsg: the schedule of a handed-back task carries the task's
// headers and payload, the hand-back headers, the enqueue time when the
// task had none, and a message ID of the delivered message's sequence;
// the task's own headers are left as they were.
func TestHandBackMsg(t *testing.T) {
	t.Parallel()
	due := time.Date(2026, 3, 1, 12, 0, 1, 0, time.UTC)
	since := time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC)
	enq := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	hdr := map[string][]string{
		"Custom":               {"x"},
		"Nats-Expected-Stream": {"OTHER"},
		HeaderVersionRefusals:  {"3"},
	}
	b := HandBack{Subject: "sched.t1", Target: "fired.t", ID: "t1", Sequence: 42, Due: due,
		Header: hdr, Data: []byte("payload"), EnqueuedAt: enq, Since: since, Refusals: 4}
	msg := b.Msg()
	want := map[string]string{
		"Custom":                       "x",
		"Nats-Expected-Stream":         "",
		HeaderVersionRefusals:          "4",
		HeaderVersionRefusedSince:      FormatTime(since),
		HeaderEnqueuedAt:               FormatTime(enq),
		HeaderTaskID:                   "t1",
		HeaderScheduledFor:             FormatTime(due),
		jetstream.MsgIDHeader:          "version-t1-42",
		jetstream.ScheduleTargetHeader: "fired.t",
	}
	for k, v := range want {
		if got := msg.Header.Get(k); got != v {
			t.Errorf("header %s = %q, want %q", k, got, v)
		}
	}
	if msg.Subject != "sched.t1" || string(msg.Data) != "payload" {
		t.Errorf("message on %s with %q", msg.Subject, msg.Data)
	}
	if len(hdr) != 3 || hdr[HeaderVersionRefusals][0] != "3" {
		t.Errorf("task headers modified: %v", hdr)
	}

	// A task with an enqueue time keeps it; without one, none is made up.
	b.Header = map[string][]string{HeaderEnqueuedAt: {"kept"}}
	if got := b.Msg().Header.Get(HeaderEnqueuedAt); got != "kept" {
		t.Errorf("enqueue time %q, want the task's", got)
	}
	b.Header, b.EnqueuedAt = nil, time.Time{}
	if got := b.Msg().Header.Get(HeaderEnqueuedAt); got != "" {
		t.Errorf("enqueue time %q, want none", got)
	}
}
