package framework_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// newTypePartitionedEnv is newEnv on a deployment of n task partitions
// spread by type.
func newTypePartitionedEnv(t *testing.T, n int) *env {
	t.Helper()
	te := testutil.NewEnv(t, streams.Config{Partitions: n, PartitionBy: streams.PartitionByType})
	cl, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: te.Server, nc: te.Conn, js: te.JS, cl: cl, parts: n}
}

// taskConsumers returns the names of the task consumers (one per type and
// priority) of a task stream, sorted.
func taskConsumers(t *testing.T, js jetstream.JetStream, stream string) []string {
	t.Helper()
	s, err := js.Stream(t.Context(), stream)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	names := s.ConsumerNames(t.Context())
	for name := range names.Name() {
		if strings.Contains(name, "type_") {
			out = append(out, name)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// ranOnce collects the IDs of the tasks handlers ran, and fails the test
// on a second run of one.
type ranOnce struct {
	t    *testing.T
	mu   sync.Mutex
	seen map[string]string // task ID → stream
	ch   chan struct{}
}

func newRanOnce(t *testing.T) *ranOnce {
	return &ranOnce{t: t, seen: map[string]string{}, ch: make(chan struct{}, 4096)}
}

func (r *ranOnce) handle(_ context.Context, task *framework.Task) error {
	r.mu.Lock()
	if _, ok := r.seen[task.ID]; ok {
		r.t.Errorf("task %s ran twice", task.ID)
	}
	r.seen[task.ID] = task.Stream
	r.mu.Unlock()
	r.ch <- struct{}{}
	return nil
}

// waitAll waits for the tasks of ids to have run.
func (r *ranOnce) waitAll(ids map[string]bool) {
	r.t.Helper()
	testutil.Wait(r.t, waitLong, "every task run", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for id := range ids {
			if _, ok := r.seen[id]; !ok {
				return false
			}
		}
		return true
	})
}

// TestPartitionsByType: on a deployment of four partitions spread by type,
// the client stores every task of a type in that type's partition, and a
// worker creates a type's consumers there and in partition 0 only, so that
// each task stream but the first holds the consumers of its share of the
// types (the acknowledgement cost of decision 033). A task published on
// the first partition's subject (as `nats pub`, cron schedules and replays
// do) runs too, as does one from a producer given the layout.
func TestPartitionsByType(t *testing.T) {
	t.Parallel()
	const parts, types = 4, 12
	e := newTypePartitionedEnv(t, parts)
	layout := streams.Layout{Partitions: parts, Ordered: parts, By: streams.PartitionByType}
	names := streams.MustNames("")
	r := newRanOnce(t)
	w := e.worker(t, framework.WithConcurrency(8))
	for i := range types {
		w.HandleFunc(fmt.Sprintf("type_%d", i), r.handle)
	}
	want := map[string]bool{}
	for i := range types * 10 {
		taskType := fmt.Sprintf("type_%d", i%types)
		info := e.enqueue(t, taskType, i, framework.WithPriority(streams.Priorities[i%len(streams.Priorities)]))
		if home := names.Partition(layout.TypePartition(taskType)).TaskStream(); info.Stream != home {
			t.Fatalf("task of %s stored in %s, want its partition's %s", taskType, info.Stream, home)
		}
		want[info.ID] = true
	}
	startWorker(t, w)

	homes := map[int]int{}
	for k := range parts {
		var wantCons []string
		for i := range types {
			taskType := fmt.Sprintf("type_%d", i)
			if k == 0 || layout.TypePartition(taskType) == k {
				for _, p := range streams.Priorities {
					wantCons = append(wantCons, names.ConsumerName(taskType, p))
				}
				homes[k]++
			}
		}
		slices.Sort(wantCons)
		if got := taskConsumers(t, e.js, names.Partition(k).TaskStream()); !slices.Equal(got, wantCons) {
			t.Errorf("partition %d holds consumers %v, want %v", k, got, wantCons)
		}
	}
	if homes[0] != types || len(homes) < 3 {
		t.Errorf("types per partition %v: want all in 0 and the others spread over at least two", homes)
	}

	// The catch-all partition, and a producer given the layout.
	for i := range types {
		id := fmt.Sprintf("raw-%d", i)
		msg := nats.NewMsg(names.TaskSubject(framework.PriorityHigh, fmt.Sprintf("type_%d", i)))
		msg.Header.Set(jetstream.MsgIDHeader, id)
		msg.Header.Set(framework.HeaderTaskID, id)
		msg.Data = []byte("1")
		if _, err := e.js.PublishMsg(t.Context(), msg); err != nil {
			t.Fatal(err)
		}
		want[id] = true
	}
	fixed, err := framework.NewClient(e.nc, framework.WithPartitionLayout(layout))
	if err != nil {
		t.Fatal(err)
	}
	for i := range types {
		info, err := fixed.Enqueue(t.Context(), fmt.Sprintf("type_%d", i), i)
		if err != nil {
			t.Fatal(err)
		}
		want[info.ID] = true
	}
	r.waitAll(want)
}

// TestPartitionsByTypeAdded: partitions added to a deployment spread by
// type move a type only to an added partition. A running worker serves
// the types' new partitions at its stranded check; a worker started after
// the change, for a type it never served, also serves the partition a
// producer holding the layout read before the change puts that type in,
// so no task waits on a partition without its type's consumers. The
// spread itself is kept when an Ensure asks for another.
func TestPartitionsByTypeAdded(t *testing.T) {
	t.Parallel()
	e := newTypePartitionedEnv(t, 2)
	before := streams.Layout{Partitions: 2, Ordered: 2, By: streams.PartitionByType}
	r := newRanOnce(t)
	const types = 8
	w := e.worker(t, framework.WithTimings(framework.Timings{StrandedCheck: time.Second}))
	for i := range types {
		w.HandleFunc(fmt.Sprintf("type_grow_%d", i), r.handle)
	}
	startWorker(t, w)
	stale, err := framework.NewClient(e.nc, framework.WithPartitionLayout(before))
	if err != nil {
		t.Fatal(err)
	}

	if _, err := streams.Ensure(t.Context(), e.js, streams.Config{Partitions: 5, PartitionBy: streams.PartitionByTask}); err == nil || !strings.Contains(err.Error(), "PartitionBy") {
		t.Errorf("ensure spreading by task: %v, want the spread refused", err)
	}
	if _, err := streams.Ensure(t.Context(), e.js, streams.Config{Partitions: 5}); err != nil {
		t.Fatal(err)
	}
	l, _, err := streams.DeployedLayout(t.Context(), e.js, streams.MustNames(""))
	if err != nil || l.Partitions != 5 || !l.ByType() {
		t.Fatalf("layout %+v (%v), want 5 partitions by type", l, err)
	}
	// A second worker, started after the change, for types of its own.
	w2 := e.worker(t)
	for i := range types {
		w2.HandleFunc(fmt.Sprintf("type_new_%d", i), r.handle)
	}
	startWorker(t, w2)

	cl, err := framework.NewClient(e.nc) // reads the new layout
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	moved := 0
	for i := range types * 4 {
		for _, kind := range []string{"grow", "new"} {
			taskType := fmt.Sprintf("type_%s_%d", kind, i%types)
			info, err := cl.Enqueue(t.Context(), taskType, i)
			if err != nil {
				t.Fatal(err)
			}
			if k := streams.MustNames("").SubjectPartition(info.Subject); k != l.TypePartition(taskType) {
				t.Fatalf("%s stored in partition %d, want %d", taskType, k, l.TypePartition(taskType))
			} else if k > 1 {
				moved++
			}
			want[info.ID] = true
			old, err := stale.Enqueue(t.Context(), taskType, i)
			if err != nil {
				t.Fatal(err)
			}
			if k := streams.MustNames("").SubjectPartition(old.Subject); k != 1 {
				t.Fatalf("the stale producer stored %s in partition %d, want 1", taskType, k)
			}
			want[old.ID] = true
		}
	}
	if moved == 0 {
		t.Fatal("no type moved to an added partition: the test proves nothing")
	}
	r.waitAll(want)
}
