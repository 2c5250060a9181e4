package enqueue

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

func TestRouterPartition(t *testing.T) {
	t.Parallel()
	byTask := streams.Layout{Partitions: 4, Ordered: 2}
	byType := streams.Layout{Partitions: 4, Ordered: 4, By: streams.PartitionByType}
	cases := []struct {
		name         string
		key, id, typ string
		l            streams.Layout
		want         int
	}{
		{"one partition", "", "id-1", "t.a", streams.Layout{Partitions: 1, Ordered: 1}, 0},
		{"one partition, ordered", "k", "id-1", "t.a", streams.Layout{Partitions: 1, Ordered: 1}, 0},
		{"ordered key over the ordered partitions", "order-9", "id-1", "t.a", byTask, topology.PartitionOf("order-9", 2)},
		{"by task ID", "", "id-1", "t.a", byTask, byTask.TaskPartition("id-1")},
		{"by type", "", "id-1", "t.a", byType, byType.TypePartition("t.a")},
		{"by type, another type", "", "id-1", "t.zz", byType, byType.TypePartition("t.zz")},
		{"by type, ordered key", "order-9", "id-1", "t.a", byType, topology.PartitionOf("order-9", 4)},
	}
	r := newRouter(nil)
	for _, tc := range cases {
		if got := r.Partition(tc.key, tc.typ, tc.id, tc.l).PartitionIndex(); got != tc.want {
			t.Errorf("%s: partition %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A task with neither key nor ID takes the partitions in turn.
func TestRouterPartitionInTurn(t *testing.T) {
	t.Parallel()
	r := newRouter(nil)
	l := streams.Layout{Partitions: 3, Ordered: 3}
	seen := map[int]int{}
	for range 9 {
		seen[r.Partition("", "t.a", "", l).PartitionIndex()]++
	}
	if len(seen) != 3 || seen[0] != 3 || seen[1] != 3 || seen[2] != 3 {
		t.Errorf("partitions taken %v, want each of 0, 1, 2 three times", seen)
	}
}

func TestRouterLayout(t *testing.T) {
	t.Parallel()
	four := streams.Layout{Partitions: 4, Ordered: 4}
	first := streams.Layout{Partitions: 1, Ordered: 1}
	boom := errors.New("no JetStream API")
	type step struct {
		read   func() (streams.Layout, bool, error) // nil: must not read
		expire bool                                 // the reread time has passed
		want   streams.Layout
	}
	deployed := func() (streams.Layout, bool, error) { return four, true, nil }
	missing := func() (streams.Layout, bool, error) { return streams.Layout{}, false, nil }
	failing := func() (streams.Layout, bool, error) { return streams.Layout{}, false, boom }
	cases := []struct {
		name  string
		steps []step
		warns bool
	}{
		{"deployed, read once", []step{{read: deployed, want: four}, {want: four}}, false},
		{"deployed, read again when due", []step{{read: deployed, want: four}, {expire: true, read: missing, want: four}}, false},
		{"no deployment yet", []step{{read: missing, want: first}, {want: first}, {expire: true, read: deployed, want: four}}, false},
		{"cannot read: first partition for good", []step{{read: failing, want: first}, {expire: true, want: first}}, true},
		{"cannot read again: keep the layout", []step{{read: deployed, want: four}, {expire: true, read: failing, want: four}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			var next func() (streams.Layout, bool, error)
			r := newRouter(func() (streams.Layout, bool, error) {
				if next == nil {
					t.Fatal("layout read when it should not be")
				}
				f := next
				next = nil
				return f()
			})
			r.log = slog.New(slog.NewTextHandler(&logs, nil))
			for i, s := range tc.steps {
				if s.expire {
					r.reread.Store(0)
				}
				next = s.read
				if got := r.Layout(t.Context()); got != s.want {
					t.Errorf("step %d: layout %+v, want %+v", i, got, s.want)
				}
				if next != nil {
					t.Errorf("step %d: layout not read", i)
				}
			}
			if warned := strings.Contains(logs.String(), "cannot read the task partition count"); warned != tc.warns {
				t.Errorf("warned %v, want %v: %s", warned, tc.warns, logs.String())
			}
		})
	}
}

// A fixed layout is never read; a read cut short by the caller's context
// is tried again at the next call.
func TestRouterLayoutFixedAndCancelled(t *testing.T) {
	t.Parallel()
	fixed := streams.Layout{Partitions: 2, Ordered: 1}
	r := newRouter(func() (streams.Layout, bool, error) { t.Fatal("fixed layout read"); return fixed, true, nil })
	r.fixed = &fixed
	if got := r.Layout(t.Context()); got != fixed {
		t.Errorf("fixed layout %+v, want %+v", got, fixed)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	reads := 0
	r = newRouter(func() (streams.Layout, bool, error) {
		reads++
		if ctx.Err() != nil && reads == 1 {
			return streams.Layout{}, false, ctx.Err()
		}
		return fixed, true, nil
	})
	if got := r.Layout(ctx); got.Partitions != 1 {
		t.Errorf("cancelled read gave %+v, want the first partition", got)
	}
	if got := r.Layout(t.Context()); got != fixed || reads != 2 {
		t.Errorf("after a cancelled read: %+v after %d reads, want %+v after 2", got, reads, fixed)
	}
}

func TestRouterStream(t *testing.T) {
	t.Parallel()
	names := streams.MustNames("")
	r := newRouter(nil)
	cases := []struct {
		name string
		msg  *nats.Msg
		want string
	}{
		{"first partition", &nats.Msg{Subject: names.TaskSubject(streams.PriorityNormal, "t.a")}, names.TaskStream()},
		{"partition 3", &nats.Msg{Subject: names.Partition(3).TaskSubject(streams.PriorityNormal, "t.a")}, names.Partition(3).TaskStream()},
		{"ordered in partition 2", &nats.Msg{Subject: names.Partition(2).OrderedSubject("t.a", 5)}, names.Partition(2).TaskStream()},
		{"delayed", &nats.Msg{Subject: names.DelaySubject("id-1"),
			Header: nats.Header{taskmsg.HeaderScheduleTarget: []string{names.Partition(2).FiredSubject(streams.PriorityNormal, "t.a")}}}, names.DelayStream()},
	}
	for _, tc := range cases {
		if got := r.Stream(tc.msg); got != tc.want {
			t.Errorf("%s: stream %s, want %s", tc.name, got, tc.want)
		}
	}
}
