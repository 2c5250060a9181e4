package fairness_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/jetflow-io/jetflow/fairness"
	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/testenv"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLong bounds every wait: generous for busy machines.
const waitLong = 60 * time.Second

// started records the tasks a type's handler started, in order, and how
// often each task ID ran.
type started struct {
	mu    sync.Mutex
	order []string       // "<key>/<payload>"
	runs  map[string]int // "<key>/<payload>" → runs (a task moved twice has two IDs)
}

func newStarted() *started { return &started{runs: map[string]int{}} }

func (s *started) handle(_ context.Context, t *framework.Task, v int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := fmt.Sprintf("%s/%d", t.Key(), v)
	s.order = append(s.order, k)
	s.runs[k]++
	return nil
}

func (s *started) distinct() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.runs)
}

func (s *started) snapshot() ([]string, map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	runs := make(map[string]int, len(s.runs))
	for k, v := range s.runs {
		runs[k] = v
	}
	return append([]string(nil), s.order...), runs
}

// worker returns a started worker of taskType with fair shares o.
func worker(t *testing.T, e *testenv.Env, taskType string, s *started, o fairness.Options, concurrency int) *framework.Worker {
	t.Helper()
	w := e.Worker(t, framework.WithConcurrency(concurrency))
	if err := fairness.Install(w); err != nil {
		t.Fatal(err)
	}
	framework.Handle(w, taskType, s.handle, fairness.Shares(o))
	testutil.StartWorker(t, w)
	return w
}

// stage enqueues n tasks of key with payloads from..from+n-1, with fair shares.
func stage(t *testing.T, c *framework.Client, taskType, key string, from, n int, opts ...framework.EnqueueOption) {
	t.Helper()
	for i := from; i < from+n; i++ {
		if _, err := fairness.Enqueue(t.Context(), c, taskType, i, key, opts...); err != nil {
			t.Fatal(err)
		}
	}
}

// staged returns how many tasks wait in the fair stream.
func staged(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(t.Context(), streams.MustNames("jetflow").FairStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0 // created by the first fair enqueue
	}
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

// TestQuietKeyStartsBeforeTheBacklog: a quiet key's tasks, staged after
// thousands of a noisy key's, start within the first rounds, not after
// the noisy backlog; every task runs once.
func TestQuietKeyStartsBeforeTheBacklog(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const noisy, quiet = 2000, 5
	stage(t, e.Client, "report.build", "noisy", 0, noisy)
	stage(t, e.Client, "report.build", "quiet", 0, quiet)
	s := newStarted()
	worker(t, e, "report.build", s, fairness.Options{Depth: 8, Wait: -1}, 2)
	testutil.Wait(t, waitLong, "every task ran", func() bool { return s.distinct() == noisy+quiet })
	order, runs := s.snapshot()
	lastQuiet := -1
	for i, k := range order {
		if strings.HasPrefix(k, "quiet/") {
			lastQuiet = i
		}
	}
	// Rounds of at most 8 tasks, one quiet task each: the last quiet task
	// starts within the first few rounds.
	if lastQuiet < 0 || lastQuiet >= 5*8 {
		t.Errorf("the last quiet task started %dth of %d, want within the first %d", lastQuiet+1, len(order), 5*8)
	}
	for id, n := range runs {
		if n != 1 {
			t.Errorf("task %s ran %d times", id, n)
		}
	}
	if n := staged(t, e.JS); n != 0 {
		t.Errorf("%d tasks left staged", n)
	}
}

// TestDepthAdaptsToTheRate: once the worker has finished tasks, the mover
// keeps their rate times Options.Wait waiting in the task stream, far more
// than Options.Depth. The first tasks run; the others block, so what the
// mover moved stays in the task stream to be counted.
func TestDepthAdaptsToTheRate(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const total, fast, minDepth = 1000, 40, 4
	stage(t, e.Client, "thumb.make", "a", 0, total/2)
	stage(t, e.Client, "thumb.make", "b", 0, total/2)
	release := make(chan struct{})
	var mu sync.Mutex
	ran := 0
	w := e.Worker(t, framework.WithConcurrency(2))
	if err := fairness.Install(w); err != nil {
		t.Fatal(err)
	}
	framework.Handle(w, "thumb.make", func(ctx context.Context, _ *framework.Task, _ int) error {
		mu.Lock()
		ran++
		n := ran
		mu.Unlock()
		if n > fast {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	}, fairness.Shares(fairness.Options{Depth: minDepth, Wait: time.Hour}))
	testutil.StartWorker(t, w)
	defer close(release) // before the worker stops
	// A fixed depth keeps at most minDepth tasks waiting, undelivered; any
	// rate above a task per hour asks for DepthCap, more than were staged.
	names := streams.MustNames("jetflow")
	testutil.Wait(t, waitLong, "many tasks waiting in the task stream", func() bool {
		var pending uint64
		for _, p := range streams.Priorities {
			c, err := e.JS.Consumer(t.Context(), names.TaskStream(), names.ConsumerName("thumb.make", p))
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			pending += c.CachedInfo().NumPending
		}
		return pending >= 10*minDepth
	})
}

// TestRoundRobinAndFIFO: with one task moved at a time, keys take turns in
// a fixed order and each key's tasks start in enqueue order.
func TestRoundRobinAndFIFO(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	for _, k := range []string{"c", "a", "b"} {
		stage(t, e.Client, "mail.send", k, 0, 4)
	}
	s := newStarted()
	worker(t, e, "mail.send", s, fairness.Options{Depth: 1, Wait: -1}, 1)
	testutil.Wait(t, waitLong, "every task ran", func() bool { return s.distinct() == 12 })
	order, _ := s.snapshot()
	var want []string
	for i := range 4 {
		for _, k := range []string{"a", "b", "c"} {
			want = append(want, fmt.Sprintf("%s/%d", k, i))
		}
	}
	if strings.Join(order, " ") != strings.Join(want, " ") {
		t.Errorf("started\n%v\nwant\n%v", order, want)
	}
}

// TestWeights: a key of weight 3 gets three tasks per turn while another
// gets one.
func TestWeights(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	stage(t, e.Client, "sync.run", "big", 0, 12)
	stage(t, e.Client, "sync.run", "small", 0, 12)
	s := newStarted()
	worker(t, e, "sync.run", s, fairness.Options{Depth: 1, Wait: -1, Weights: map[string]int{"big": 3}}, 1)
	testutil.Wait(t, waitLong, "every task ran", func() bool { return s.distinct() == 24 })
	order, _ := s.snapshot()
	big := 0
	for _, k := range order[:16] {
		if strings.HasPrefix(k, "big/") {
			big++
		}
	}
	// Turns of 3 big, 1 small: 12 big among the first 16.
	if big != 12 {
		t.Errorf("%d big tasks among the first 16 started, want 12: %v", big, order)
	}
}

// TestRacingMoversMoveOnce: three workers move the same keys at once;
// every task runs exactly once, in order within its key.
func TestRacingMoversMoveOnce(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	const keys, per = 6, 60
	for k := range keys {
		stage(t, e.Client, "race.task", fmt.Sprintf("k%d", k), 0, per)
	}
	s := newStarted()
	for range 3 {
		worker(t, e, "race.task", s, fairness.Options{Depth: 4}, 1)
	}
	testutil.Wait(t, waitLong, "every task ran", func() bool { return s.distinct() == keys*per })
	_, runs := s.snapshot()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("task %s ran %d times", id, n)
		}
	}
	testutil.Wait(t, waitLong, "nothing left staged", func() bool { return staged(t, e.JS) == 0 })
	_, runs = s.snapshot()
	if len(runs) != keys*per {
		t.Errorf("%d tasks ran, want %d", len(runs), keys*per)
	}
}

// TestStopAndRestartLoseNothing: a worker shut down while it moves and a
// server restart while another moves lose no staged task, and run none
// twice but those the restart caught (at least once).
func TestStopAndRestartLoseNothing(t *testing.T) {
	t.Parallel()
	e := testenv.New(t, testutil.WithListen())
	const keys, per = 5, 120
	for k := range keys {
		stage(t, e.Client, "batch.item", fmt.Sprintf("k%d", k), 0, per)
	}
	s := newStarted()
	a := worker(t, e, "batch.item", s, fairness.Options{Depth: 8}, 2)
	worker(t, e, "batch.item", s, fairness.Options{Depth: 8}, 2)
	testutil.Wait(t, waitLong, "a first part ran", func() bool { return s.distinct() >= 100 })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := a.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	testutil.Wait(t, waitLong, "a second part ran", func() bool { return s.distinct() >= 250 })
	srv := testutil.RestartServer(t, e.Server)
	testutil.Wait(t, waitLong, "server back", func() bool { return srv.JetStreamEnabled() && e.Conn.IsConnected() })
	testutil.Wait(t, waitLong, "every task ran", func() bool { return s.distinct() == keys*per })
	_, runs := s.snapshot()
	twice := 0
	for _, n := range runs {
		if n > 1 {
			twice++
		}
	}
	// At least once: what may run again is the tasks in flight at the
	// restart (2 slots), and one round of moves (Depth 8) whose copies the
	// restart caught between the publish and the delete: the restarted
	// server's deduplication remembers only the IDs of messages it still
	// stores, and a moved task may have run and been removed already.
	if twice > 2+8 {
		t.Errorf("%d tasks ran more than once, want at most 10", twice)
	}
	testutil.Wait(t, waitLong, "nothing left staged", func() bool { return staged(t, e.JS) == 0 })
}

// TestHostileStagedMessages: messages stored on the fair subjects by
// anyone, with an invalid subject, key token, ID or key header, are
// dead-lettered with reason "invalid" and block no task staged after them
// on their key; a rollup header is refused by the stream.
func TestHostileStagedMessages(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	names := streams.MustNames("jetflow")
	stage(t, e.Client, "hostile.task", "k", 0, 1) // creates the stream
	publish := func(subject string, h nats.Header) {
		t.Helper()
		if _, err := e.JS.PublishMsg(t.Context(), &nats.Msg{Subject: subject, Header: h, Data: []byte("1")}); err != nil {
			t.Fatal(err)
		}
	}
	good := names.FairSubject(streams.PriorityNormal, "hostile.task", "k")
	publish("jetflow.fair.nonsense", nats.Header{"Nats-Msg-Id": {"x1"}})
	publish("jetflow.fair.hostile.task.normal.!!", nats.Header{"Nats-Msg-Id": {"x2"}})
	publish(good, nats.Header{"Jetflow-Key": {"k"}})                             // no ID
	publish(good, nats.Header{"Nats-Msg-Id": {"bad id"}, "Jetflow-Key": {"k"}})  // invalid ID
	publish(good, nats.Header{"Nats-Msg-Id": {"x5"}, "Jetflow-Key": {"other"}})  // another key
	publish(good, nats.Header{"Nats-Msg-Id": {"x6"}, "Jetflow-Key": {"k", "k"}}) // two keys
	_, err := e.JS.PublishMsg(t.Context(), &nats.Msg{Subject: good, Data: []byte("1"),
		Header: nats.Header{"Nats-Msg-Id": {"x7"}, "Jetflow-Key": {"k"}, "Nats-Rollup": {"all"}}})
	if err == nil {
		t.Error("the fair stream took a rollup")
	}
	stage(t, e.Client, "hostile.task", "k", 1, 2)
	s := newStarted()
	worker(t, e, "hostile.task", s, fairness.Options{}, 2)
	testutil.Wait(t, waitLong, "the valid tasks ran", func() bool { return s.distinct() == 3 })
	dlq, err := e.JS.Stream(t.Context(), names.DLQStream())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Wait(t, waitLong, "6 records", func() bool {
		info, err := dlq.Info(t.Context())
		return err == nil && info.State.Msgs == 6
	})
	for seq := uint64(1); seq <= 6; seq++ {
		m, err := dlq.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if r := m.Header.Get("Jetflow-Reason"); r != "invalid" {
			t.Errorf("record %d (%s): reason %q", seq, m.Subject, r)
		}
	}
	testutil.Wait(t, waitLong, "nothing left staged", func() bool { return staged(t, e.JS) == 0 })
}

// TestCallerErrors: invalid keys and options get an error wrapping
// framework.ErrInvalidOption, and nothing is staged.
func TestCallerErrors(t *testing.T) {
	t.Parallel()
	e := testenv.New(t)
	long := strings.Repeat("k", framework.MaxKeyLen+1)
	tests := []struct {
		name string
		key  string
		opts []framework.EnqueueOption
	}{
		{"empty key", "", nil},
		{"long key", long, nil},
		{"key with spaces at its ends", " k ", nil},
		{"unknown priority", "k", []framework.EnqueueOption{framework.WithPriority(framework.Priority(9))}},
		{"delayed", "k", []framework.EnqueueOption{framework.In(time.Minute)}},
		{"unique", "k", []framework.EnqueueOption{framework.Unique(time.Minute)}},
		{"ordered", "k", []framework.EnqueueOption{framework.Ordered("o")}},
	}
	for _, tt := range tests {
		_, err := fairness.Enqueue(t.Context(), e.Client, "caller.task", 1, tt.key, tt.opts...)
		if !errors.Is(err, framework.ErrInvalidOption) {
			t.Errorf("%s: err = %v, want ErrInvalidOption", tt.name, err)
		}
	}
	if _, err := fairness.Enqueue(t.Context(), e.Client, "Bad Type", 1, "k"); err == nil {
		t.Error("an invalid type was staged")
	}
	if n := staged(t, e.JS); n != 0 {
		t.Errorf("%d tasks staged", n)
	}
}
