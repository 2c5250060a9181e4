package intake

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// bound is every wait of these tests: generous, for a busy machine.
const bound = 30 * time.Second

// reg is the tests' registration of a type, work their part of a task.
type (
	reg  struct{ name string }
	work struct{ runs int }
	task = Pending[*reg, work]
)

// harness is a worker for the tests: a stage on an embedded server whose
// executors run each task (recording its payload, holding it while gate
// is closed), ack it and take the stage's next one.
type harness struct {
	t     *testing.T
	env   *testutil.Env
	names streams.Names
	s     *Stage[*reg, work]
	loops liveness.Loops

	handedBack, ackErrors, pullsLost, direct atomic.Uint64

	ran      chan *task     // every task that ran, as it ran
	failed   chan string    // every AckFailed op
	lost     chan string    // every PullLost type
	grownFor chan int       // the partition count of every Grown call
	gate     chan struct{}  // closed: handlers return
	workers  func() error   // the registry read's error (nil: none listed)
	grown    []Source[*reg] // what Grown returns
	steps    []string       // the name of every start-up step
	mu       sync.Mutex
}

// newHarness starts a server with the topology of cfg and a stage of
// concurrency slots on it; the stage is stopped and drained at cleanup.
func newHarness(t *testing.T, concurrency int, cfg streams.Config) *harness {
	t.Helper()
	env := testutil.NewEnv(t, cfg)
	names, err := streams.NewNames("")
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, env: env, names: names,
		ran: make(chan *task, 1000), failed: make(chan string, 100), lost: make(chan string, 100),
		grownFor: make(chan int, 10), gate: make(chan struct{}),
		workers: func() error { return fleet.ErrNoRegistry }}
	close(h.gate)
	nc := env.Connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	h.s = New(Config[*reg, work]{
		Conn: nc, JS: js, Names: names, Log: slog.New(slog.DiscardHandler),
		Concurrency: concurrency, Weights: [4]int{8, 4, 2, 1},
		Loops:    &h.loops,
		Counters: Counters{HandedBack: &h.handedBack, AckErrors: &h.ackErrors, PullsLost: &h.pullsLost, StartedDirect: &h.direct},
		Self:     "self", Ctx: t.Context(),
		Workers: func(context.Context) (*fleet.Listing, error) { return nil, h.workers() },
		Step: func(ctx context.Context, what string, step func(ctx context.Context) error) error {
			h.mu.Lock()
			h.steps = append(h.steps, what)
			h.mu.Unlock()
			return step(ctx)
		},
		Grown: func(_ context.Context, added []streams.Names) ([]Source[*reg], error) {
			h.grownFor <- added[len(added)-1].PartitionIndex() + 1
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.grown, nil
		},
		AckFailed: func(_ *task, op string, _ error) { h.failed <- op },
		PullLost:  func(taskType string, _ streams.Priority) { h.lost <- taskType },
	})
	t.Cleanup(h.stop)
	return h
}

// add registers a type of the given priorities.
func (h *harness) add(name string, prios ...streams.Priority) *Type[*reg] {
	t := &Type[*reg]{Spec: Spec{Name: name, Priorities: prios, AckWait: 30 * time.Second},
		Heartbeat: 5 * time.Second, Concurrency: 100, Ext: &reg{name: name}}
	h.s.Add(t)
	return t
}

// start ensures the types' consumers, starts the stage and pulls them and
// more.
func (h *harness) start(more ...Source[*reg]) []Source[*reg] {
	h.t.Helper()
	if err := h.s.Discover(h.t.Context()); err != nil {
		h.t.Fatal(err)
	}
	srcs, err := h.s.Ensure(h.t.Context())
	if err != nil {
		h.t.Fatal(err)
	}
	h.s.Start(h.run)
	h.s.Pull(append(srcs, more...))
	return srcs
}

// stop stops the stage and waits for it.
func (h *harness) stop() {
	h.s.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	_, idle, _ := h.s.Drain(ctx, func() {})
	h.s.StopBackground(idle)
}

// run is the executors' loop (attempt.Executor.Run's part the stage sees).
func (h *harness) run(p *task) {
	for p != nil {
		if p.Resumed() || p.Orphaned() {
			h.t.Errorf("task %s resumed or orphaned: never parked", p.Msg.Data())
		}
		p.X.runs++
		h.ran <- p
		<-h.gate
		if p.Claim() {
			var seq uint64
			if pm, ok := p.Msg.(*pull.Msg); ok {
				d, _ := pm.Delivery()
				seq = d.StreamSeq
			}
			if err := h.s.Ack(p, seq); err != nil {
				h.t.Errorf("ack: %v", err)
			}
			p.LaneSettled(false)
		}
		p = h.s.Next(p)
	}
}

// publish stores a task of taskType at prio with payload data.
func (h *harness) publish(subject, data string, hdr nats.Header) {
	h.t.Helper()
	if _, err := h.env.JS.PublishMsg(h.t.Context(), &nats.Msg{Subject: subject, Data: []byte(data), Header: hdr}); err != nil {
		h.t.Fatal(err)
	}
}

// next returns the next task that ran.
func (h *harness) next() *task { return testutil.Recv(h.t, h.ran, bound, "a task to run") }

// consumer returns the info of a consumer of the base task stream.
func (h *harness) consumer(name string) *jetstream.ConsumerInfo {
	h.t.Helper()
	c, err := h.env.JS.Consumer(h.t.Context(), h.names.TaskStream(), name)
	if err != nil {
		h.t.Fatal(err)
	}
	ci, err := c.Info(h.t.Context())
	if err != nil {
		h.t.Fatal(err)
	}
	return ci
}
