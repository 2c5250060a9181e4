package access_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/dlq"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/inspect"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// violations collects the permission violations the server reports on a
// connection.
type violations chan error

// newViolations returns a collector whose violations, if the test failed,
// are logged under who when it ends.
func newViolations(t *testing.T, who string) violations {
	v := make(violations, 64)
	t.Cleanup(func() {
		if t.Failed() {
			if errs := v.drain(); len(errs) > 0 {
				t.Logf("%s's permission violations: %v", who, errs)
			}
		}
	})
	return v
}

func (v violations) handler() nats.Option {
	return nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			select {
			case v <- err:
			default:
			}
		}
	})
}

func (v violations) drain() []error {
	var out []error
	for {
		select {
		case err := <-v:
			out = append(out, err)
		default:
			return out
		}
	}
}

// start starts w, failing the test with the permission violations of its
// connection when it has not started within 30 s (a worker retries a
// refused consumer create until its context ends), and shuts it down when
// the test ends.
func start(t *testing.T, w *framework.Worker, v violations) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := w.Start(ctx); err != nil {
		t.Fatalf("worker start: %v (permission violations %v)", err, v.drain())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = w.Shutdown(ctx)
	})
}

// TestPartitionedDeploymentRunsWithItsGrants runs a deployment of three
// task partitions (testutil.RunSecured, the accounts layout) with the
// users access renders for it: a producer (a tenant's, its client pinned
// to the three partitions) enqueues tasks that land in every partition's
// stream, a worker with the worker role serves all of them, a task of
// partition 1 or 2 whose worker dies in its only attempt is dead-lettered
// by another worker's router from its partition's advisory, and an
// operator reads the dead letter and the queues of every partition. No
// role hits a permission violation.
func TestPartitionedDeploymentRunsWithItsGrants(t *testing.T) {
	t.Parallel()
	const (
		typ   = "part.perm"
		parts = 3
	)
	s := testutil.RunSecured(t, testutil.SecuredConfig{Types: []string{typ}, Streams: streams.Config{Partitions: parts}})
	names := streams.MustNames("")
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	adminJS, err := jetstream.New(s.Connect(t, testutil.SecuredAdmin))
	if err != nil {
		t.Fatal(err)
	}
	if err := framework.EnsureBuckets(ctx, adminJS); err != nil {
		t.Fatalf("admin: ensure buckets: %v", err)
	}
	streamsOf := make([]string, parts)
	for k, p := range names.Partitions(parts) {
		streamsOf[k] = p.TaskStream()
	}

	pv := newViolations(t, "producer")
	pc := s.Connect(t, testutil.SecuredProducer, pv.handler())
	cl, err := framework.NewClient(pc, framework.WithStateTracking(false), framework.WithPartitions(parts))
	if err != nil {
		t.Fatal(err)
	}

	// A worker without the router takes the failing task (of partition 1
	// or 2) and dies in its only attempt.
	doomed := ""
	for i := 0; doomed == ""; i++ {
		if id := fmt.Sprintf("doomed-%d", i); topology.PartitionOf(id, parts) > 0 {
			doomed = id
		}
	}
	dv := newViolations(t, "dying worker")
	dc := s.Connect(t, testutil.SecuredWorker, dv.handler())
	dying, err := framework.NewWorker(dc, framework.WithDeadLetterRouter(false))
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	var startOnce sync.Once
	dying.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
		startOnce.Do(func() { close(started) })
		<-release
		return nil
	}, framework.WithAckWait(time.Second), framework.WithMaxAttempts(1))
	start(t, dying, dv)
	t.Cleanup(func() { close(release) })
	info, err := cl.Enqueue(ctx, typ, nil, framework.WithID(doomed))
	if err != nil {
		t.Fatalf("enqueue %s: %v (violations %v)", doomed, err, pv.drain())
	}
	if info.Stream == streamsOf[0] || !slices.Contains(streamsOf, info.Stream) {
		t.Fatalf("task %s stored in %q, want a partition's stream other than the first", doomed, info.Stream)
	}
	testutil.Recv(t, started, time.Minute, "the doomed task's only attempt")
	dc.Close() // dies on its last delivery: no record written

	// The worker with the router serves every partition.
	wv := newViolations(t, "worker")
	wc := s.Connect(t, testutil.SecuredWorker, wv.handler())
	w, err := framework.NewWorker(wc, framework.WithTimings(framework.Timings{ReconcileInterval: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	ranOn := map[string]string{} // task ID → stream it ran from
	ran := make(chan struct{}, 256)
	w.HandleFunc(typ, func(_ context.Context, task *framework.Task) error {
		mu.Lock()
		ranOn[task.ID] = task.Stream
		mu.Unlock()
		ran <- struct{}{}
		return nil
	}, framework.WithAckWait(time.Second), framework.WithMaxAttempts(1))
	start(t, w, wv)
	if got := w.TaskStreams(); !slices.Equal(got, streamsOf) {
		t.Errorf("worker serves %v, want %v", got, streamsOf)
	}

	const tasks = 30
	storedIn := map[string]int{}
	for i := range tasks {
		info, err := cl.Enqueue(ctx, typ, i, framework.WithID(fmt.Sprintf("ok-%d", i)))
		if err != nil {
			t.Fatalf("enqueue: %v (violations %v)", err, pv.drain())
		}
		storedIn[info.Stream]++
	}
	if len(storedIn) != parts {
		t.Errorf("tasks stored in %v, want all of %v", storedIn, streamsOf)
	}
	for range tasks {
		testutil.Recv(t, ran, time.Minute, "a task to run")
	}
	mu.Lock()
	ranIn := map[string]int{}
	for _, stream := range ranOn {
		ranIn[stream]++
	}
	mu.Unlock()
	for _, stream := range streamsOf {
		if ranIn[stream] == 0 || ranIn[stream] != storedIn[stream] {
			t.Errorf("%s: %d tasks ran, %d stored", stream, ranIn[stream], storedIn[stream])
		}
	}

	// The doomed task reaches the dead-letter stream through the router
	// (or the reconciler) of the second worker.
	ov := newViolations(t, "operator")
	oc := s.Connect(t, testutil.SecuredOperator, ov.handler())
	ocl, err := framework.NewClient(oc)
	if err != nil {
		t.Fatal(err)
	}
	var recs []dlq.Record
	testutil.Wait(t, time.Minute, "the doomed task's dead letter", func() bool {
		recs, _, err = dlq.New(ocl).List(ctx, dlq.Filter{}, dlq.Page{})
		return err == nil && len(recs) > 0
	})
	if r := recs[0]; len(recs) != 1 || r.TaskID != doomed || (r.RoutedBy != "router" && r.RoutedBy != "reconciler") ||
		names.SubjectPartition(r.OriginalSubject) == 0 {
		t.Errorf("dead letters %+v, want %s from partition %d routed by the router", recs, doomed, topology.PartitionOf(doomed, parts))
	}
	st, err := inspect.New(ocl).QueueStats(ctx)
	if err != nil || len(st.Partitions) != parts {
		t.Errorf("operator queue stats: %+v, %v", st.Partitions, err)
	}
	for _, stream := range streamsOf {
		testutil.Wait(t, time.Minute, stream+" empty", func() bool {
			s, err := adminJS.Stream(ctx, stream)
			if err != nil {
				return false
			}
			info, err := s.Info(ctx)
			return err == nil && info.State.Msgs == 0
		})
	}
	for who, v := range map[string]violations{"producer": pv, "dying worker": dv, "worker": wv, "operator": ov} {
		for _, err := range v.drain() {
			t.Errorf("%s hit a permission violation on an allowed path: %v", who, err)
		}
	}
}
