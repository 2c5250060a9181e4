package taskmsg

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestReplayInFlightIsNoBrokenCron: a dead-letter replay's one-shot
// schedule on a cron subject is a schedule jetflow wrote, not a broken cron;
// a repeating schedule that merely carries the replay header is judged as
// any cron.
func TestReplayInFlightIsNoBrokenCron(t *testing.T) {
	any := func(string) bool { return true }
	replay := nats.Header{jetstream.ScheduleHeader: {"@at 2026-12-04T07:00:00Z"}, HeaderReplayedFromSeq: {"12"}}
	if p := CronProblem("replay-12-1", replay, nil, any); p != "" {
		t.Errorf("replay in flight: %q, want no problem", p)
	}
	forged := nats.Header{jetstream.ScheduleHeader: {"@every 1s"}, HeaderReplayedFromSeq: {"12"}}
	if p := CronProblem("daily", forged, nil, any); p == "" {
		t.Error("a repeating schedule with a replay header passed as a cron jetflow wrote")
	}
	if p := CronProblem("daily", nats.Header{HeaderReplayedFromSeq: {"12"}}, []byte("x"), any); p == "" {
		t.Error("a plain message with a replay header passed as a schedule")
	}
}
