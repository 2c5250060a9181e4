package framework_test

import (
	"testing"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
)

// Enqueue reads the clock only for a due time or a unique period: a due
// time in the past still gives an immediate task, a future one a delayed
// task, and a task without either is immediate.
func TestEnqueueDueTimes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := streams.MustNames("")
	work := names.TaskSubject(streams.PriorityNormal, "due.check")
	cases := []struct {
		name    string
		opts    []framework.EnqueueOption
		delayed bool
	}{
		{"none", nil, false},
		{"at in the past", []framework.EnqueueOption{framework.At(time.Now().Add(-time.Minute))}, false},
		{"in zero", []framework.EnqueueOption{framework.In(0)}, false},
		{"at in an hour", []framework.EnqueueOption{framework.At(time.Now().Add(time.Hour))}, true},
		{"in an hour", []framework.EnqueueOption{framework.In(time.Hour)}, true},
	}
	for _, tc := range cases {
		info := e.enqueue(t, "due.check", nil, tc.opts...)
		if tc.delayed {
			if info.ScheduledFor.IsZero() || info.Subject == work || info.Stream != names.DelayStream() {
				t.Errorf("%s: %+v, want a delayed task in %s", tc.name, info, names.DelayStream())
			}
			continue
		}
		if !info.ScheduledFor.IsZero() || info.Subject != work || info.Stream != names.TaskStream() {
			t.Errorf("%s: %+v, want an immediate task on %s", tc.name, info, work)
		}
	}
}

// EnqueueMany sizes its channel to a batch smaller than the window: an
// empty batch and a small one return at once with their results in order.
func TestEnqueueManySmallBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	infos, err := e.cl.EnqueueMany(t.Context(), nil)
	if err != nil || len(infos) != 0 {
		t.Fatalf("EnqueueMany(nil) = %v, %v; want no results and no error", infos, err)
	}
	jobs := []framework.TaskSpec{
		{Type: "small.a"},
		{Type: "small.b", Options: []framework.EnqueueOption{framework.WithPriority(framework.PriorityHigh)}},
		{Type: "small.a", Options: []framework.EnqueueOption{framework.WithID("small-3")}},
	}
	infos, err = e.cl.EnqueueMany(t.Context(), jobs)
	if err != nil {
		t.Fatal(err)
	}
	names := streams.MustNames("")
	want := []string{
		names.TaskSubject(streams.PriorityNormal, "small.a"),
		names.TaskSubject(streams.PriorityHigh, "small.b"),
		names.TaskSubject(streams.PriorityNormal, "small.a"),
	}
	var last uint64
	for i, info := range infos {
		if info.Type != jobs[i].Type || info.Subject != want[i] || info.Sequence <= last {
			t.Errorf("result %d = %+v, want type %s on %s after sequence %d", i, info, jobs[i].Type, want[i], last)
		}
		last = info.Sequence
	}
	if infos[2].ID != "small-3" {
		t.Errorf("result 2 ID = %q, want small-3", infos[2].ID)
	}
}
