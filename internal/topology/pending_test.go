package topology_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// ParsePending reads what a pending delayed task's headers say, and
// nothing a hostile header could smuggle in.
func TestParsePending(t *testing.T) {
	n := streams.MustNames(streams.DefaultPrefix)
	due := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	enq := due.Add(-time.Hour)

	h := nats.Header{}
	h.Set(jetstream.ScheduleTargetHeader, n.FiredSubject(streams.PriorityHigh, "email.send"))
	h.Set("Jetflow-Scheduled-For", due.Format(time.RFC3339Nano))
	h.Set("Jetflow-Enqueued-At", enq.Format(time.RFC3339Nano))
	p := topology.ParsePending(n, h)
	if p.TargetErr != nil || p.Priority != streams.PriorityHigh || p.Type != "email.send" || !p.Due.Equal(due) || !p.EnqueuedAt.Equal(enq) {
		t.Fatalf("ParsePending = %+v", p)
	}

	// Without Jetflow-Scheduled-For, the schedule's own "@at" time.
	h.Del("Jetflow-Scheduled-For")
	h.Set(jetstream.ScheduleHeader, "@at "+due.Format(time.RFC3339Nano))
	if p := topology.ParsePending(n, h); !p.Due.Equal(due) {
		t.Fatalf("Due from @at = %v, want %v", p.Due, due)
	}

	// A target outside the topology and unreadable times give zero values.
	bad := nats.Header{}
	bad.Set(jetstream.ScheduleTargetHeader, "elsewhere.task.high.x")
	bad.Set("Jetflow-Scheduled-For", "tomorrow")
	bad.Set("Jetflow-Enqueued-At", "\x00")
	p = topology.ParsePending(n, bad)
	if !errors.Is(p.TargetErr, streams.ErrInvalidSubject) || p.Type != "" || p.Priority != 0 || !p.Due.IsZero() || !p.EnqueuedAt.IsZero() {
		t.Fatalf("ParsePending(hostile) = %+v", p)
	}
}
