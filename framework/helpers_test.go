package framework_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// waitLong bounds every wait of the tests: generous, so that busy machines
// do not cause flakes; a correct run never gets near it.
const waitLong = 20 * time.Second

// env is one embedded server with the topology ensured.
type env struct {
	srv *testutil.Server
	nc  *nats.Conn
	js  jetstream.JetStream
	cl  *framework.Client
	// parts is the task partition count (newPartitionedEnv); 0 is one.
	parts int
}

func newEnv(t *testing.T, opts ...testutil.ServerOption) *env {
	t.Helper()
	te := testutil.NewEnv(t, streams.Config{}, opts...)
	cl, err := framework.NewClient(te.Conn)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: te.Server, nc: te.Conn, js: te.JS, cl: cl}
}

// startWorker starts w on its own connection and shuts it down at cleanup.
func startWorker(t *testing.T, w *framework.Worker) {
	t.Helper()
	testutil.StartWorker(t, w)
}

func (e *env) worker(t *testing.T, opts ...framework.WorkerOption) *framework.Worker {
	t.Helper()
	nc := testutil.Connect(t, e.srv)
	w, err := framework.NewWorker(nc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// enqueue enqueues a task and fails the test on error.
func (e *env) enqueue(t *testing.T, taskType string, payload any, opts ...framework.EnqueueOption) framework.TaskInfo {
	t.Helper()
	info, err := e.cl.Enqueue(t.Context(), taskType, payload, opts...)
	if err != nil {
		t.Fatalf("enqueue %s: %v", taskType, err)
	}
	return info
}

// consumerInfo returns the server's view of the consumer of (taskType, p).
func (e *env) consumerInfo(t *testing.T, taskType string, p framework.Priority) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	names := streams.MustNames("")
	c, err := e.js.Consumer(ctx, names.TaskStream(), names.ConsumerName(taskType, p))
	if err != nil {
		t.Fatalf("consumer %s/%s: %v", taskType, p, err)
	}
	ci, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info %s/%s: %v", taskType, p, err)
	}
	return ci
}

// waitSettled waits until the server has nothing left to deliver or to
// await an ack for on the consumer of (taskType, p), and returns its info.
// Together with counters kept by the handler it proves that no further
// attempt is coming.
func (e *env) waitSettled(t *testing.T, taskType string, p framework.Priority) *jetstream.ConsumerInfo {
	t.Helper()
	var ci *jetstream.ConsumerInfo
	testutil.Wait(t, waitLong, "consumer "+taskType+" settled", func() bool {
		ci = e.consumerInfo(t, taskType, p)
		return ci.NumPending == 0 && ci.NumAckPending == 0
	})
	// The same consumer in the other task partitions.
	names := streams.MustNames("")
	for _, part := range names.Partitions(e.parts)[1:] {
		testutil.Wait(t, waitLong, "consumer "+taskType+" settled in "+part.TaskStream(), func() bool {
			c, err := e.js.Consumer(t.Context(), part.TaskStream(), names.ConsumerName(taskType, p))
			if err != nil {
				t.Fatalf("consumer %s/%s in %s: %v", taskType, p, part.TaskStream(), err)
			}
			info := c.CachedInfo()
			return info.NumPending == 0 && info.NumAckPending == 0
		})
	}
	return ci
}

// taskStreamMsgs returns the number of messages stored in the task streams
// (of every partition) and the schedule stream (delayed tasks, cron schedules, fired schedules
// not yet sourced).
func (e *env) taskStreamMsgs(t *testing.T) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	names := streams.MustNames("")
	var n uint64
	all := []string{names.ScheduleStream(), names.DelayStream()}
	for _, part := range names.Partitions(e.parts) {
		all = append(all, part.TaskStream())
	}
	for _, name := range all {
		s, err := e.js.Stream(ctx, name)
		if err != nil {
			t.Fatalf("stream %s: %v", name, err)
		}
		si, err := s.Info(ctx)
		if err != nil {
			t.Fatalf("stream %s info: %v", name, err)
		}
		n += si.State.Msgs
	}
	return n
}

// waitCond polls cond every millisecond until it holds or d passes. It is
// meant for handlers, which must not call t.Fatal; it reports whether cond
// held.
func waitCond(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			return cond()
		case <-ctx.Done():
			return cond()
		}
	}
	return true
}

// event is one hook call.
type event struct {
	Hook    string // started, succeeded, retried, failed
	ID      string
	Attempt int
	Err     error
	Delay   time.Duration
	At      time.Time
}

// recorder collects hook calls.
type recorder struct {
	mu     sync.Mutex
	events []event
}

func newRecorder() *recorder { return &recorder{} }

func (r *recorder) add(ev event) {
	ev.At = time.Now()
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}

// hooks returns hooks feeding r.
func (r *recorder) hooks() framework.Hooks {
	return framework.Hooks{
		Started: func(_ context.Context, t *framework.Task) {
			r.add(event{Hook: "started", ID: t.ID, Attempt: t.Attempt})
		},
		Finished: func(_ context.Context, t *framework.Task, o framework.Outcome) {
			switch o.Action {
			case framework.ActionAck:
				r.add(event{Hook: "succeeded", ID: t.ID, Attempt: t.Attempt})
			case framework.ActionRetry:
				r.add(event{Hook: "retried", ID: t.ID, Attempt: t.Attempt, Err: o.Err, Delay: o.Delay})
			case framework.ActionFail:
				r.add(event{Hook: "failed", ID: t.ID, Attempt: t.Attempt, Err: o.Err})
			}
		},
	}
}

// waitFor waits until task id had its first call of hook and returns it.
func (r *recorder) waitFor(t *testing.T, hook, id string) event {
	t.Helper()
	var got event
	testutil.Wait(t, waitLong, "hook "+hook+" of task "+id, func() bool {
		for _, ev := range r.of(id) {
			if ev.Hook == hook {
				got = ev
				return true
			}
		}
		return false
	})
	return got
}

// all returns a copy of the events so far.
func (r *recorder) all() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.events...)
}

// of returns the events of task id, in order.
func (r *recorder) of(id string) []event {
	var out []event
	for _, ev := range r.all() {
		if ev.ID == id {
			out = append(out, ev)
		}
	}
	return out
}

// count returns how many events of hook task id had.
func (r *recorder) count(hook, id string) int {
	n := 0
	for _, ev := range r.of(id) {
		if ev.Hook == hook {
			n++
		}
	}
	return n
}
