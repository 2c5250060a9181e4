package deadletter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/delays"
)

// A worker's cores: Prepare checks the first partition's streams and each
// further one's task stream, Of finds each partition's core (the first's
// for an unknown stream), Grow adds partitions later, and Run returns with
// its context.
func TestCores(t *testing.T) {
	t.Parallel()
	first, js := newCore(t)
	topoOf := func(stream string) Topology {
		topo := testTopo
		topo.TaskStream = stream
		return topo
	}
	made := map[string]*Core{}
	newCore := func(stream string) *Core {
		if stream == "JETFLOW_TASKS" {
			return first
		}
		c := NewCore(first.nc, js, topoOf(stream), discard())
		made[stream] = c
		return c
	}
	x := NewCores("JETFLOW_TASKS", newCore, 4, time.Hour, time.Hour)
	if err := x.Prepare(t.Context(), []string{"JETFLOW_TASKS_1"}); err == nil {
		t.Fatal("Prepare with a missing task stream succeeded")
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "JETFLOW_TASKS_1", Subjects: []string{"p1.>"}}); err != nil {
		t.Fatal(err)
	}
	if err := x.Prepare(t.Context(), []string{"JETFLOW_TASKS_1"}); err != nil {
		t.Fatal(err)
	}
	second := made["JETFLOW_TASKS_1"]
	if err := x.Grow(t.Context(), []string{"JETFLOW_TASKS_2"}); err == nil {
		t.Fatal("Grow with a missing task stream succeeded")
	}
	for stream, want := range map[string]*Core{"JETFLOW_TASKS": first, "JETFLOW_TASKS_1": second, "JETFLOW_TASKS_2": first, "OTHER": first} {
		if got := x.Of(stream); got != want {
			t.Errorf("Of(%s) = %p, want %p", stream, got, want)
		}
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); x.Run(ctx) }()
	cancel()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func TestReasonOf(t *testing.T) {
	t.Parallel()
	corrupt, decode, version := errors.New("corrupt"), errors.New("decode"), errors.New("version")
	tests := []struct {
		name      string
		cause     error
		permanent bool
		want      string
	}{
		{"corrupt", fmt.Errorf("x: %w", corrupt), true, ReasonInvalid},
		{"decode", fmt.Errorf("x: %w", decode), true, ReasonDecode},
		{"version", fmt.Errorf("x: %w", version), true, ReasonVersion},
		{"permanent", errors.New("card declined"), true, ReasonPermanent},
		{"last attempt", errors.New("timeout"), false, ReasonMaxDeliveries},
	}
	for _, tc := range tests {
		if got := ReasonOf(tc.cause, tc.permanent, corrupt, decode, version); got != tc.want {
			t.Errorf("%s: ReasonOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// The mover's rejections get records: an invalid delayed task with reason
// "invalid" and a cause wrapping the corrupt error, a conflict with reason
// "conflict".
func TestRejectDelayed(t *testing.T) {
	t.Parallel()
	c, js := newCore(t)
	corrupt := errors.New("corrupt task")
	reject := c.RejectDelayed("JETFLOW_DELAYS", corrupt)
	r := delays.Rejected{Seq: 3, Subject: "jetflow.delay.t1", ID: "t1", Type: "a", Priority: "normal", Deliveries: 1,
		Cause: errors.New("bad due time")}
	if err := reject(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	r.Seq, r.Conflict, r.Cause = 4, true, errors.New("pending schedule")
	if err := reject(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	recs := records(t, js)
	if len(recs) != 2 {
		t.Fatalf("%d records; want 2", len(recs))
	}
	want := []struct{ reason, err string }{
		{ReasonInvalid, "corrupt task: delayed task: bad due time"},
		{ReasonConflict, "delayed task: pending schedule"},
	}
	for i, w := range want {
		h := recs[i].Header
		if h.Get(HeaderReason) != w.reason || !strings.Contains(h.Get(HeaderLastError), w.err) {
			t.Errorf("record %d: reason %q, error %q; want %+v", i, h.Get(HeaderReason), h.Get(HeaderLastError), w)
		}
	}
}
