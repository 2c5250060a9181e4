package lanes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// A lane on an embedded server, and a fake worker that runs a [Runner]
// over it: the runner's tests drive real deliveries, pins, acks and naks.

const laneType = "t.lane"

// laneEnv is one server with the task topology and one lane consumer over
// every ordered slot of laneType.
type laneEnv struct {
	t     *testing.T
	srv   *testutil.Server
	js    jetstream.JetStream
	names streams.Names
	cons  jetstream.Consumer
	// The lane's timings; heartbeat is the runner's.
	ackWait, pinnedTTL, heartbeat time.Duration
}

func newLaneEnv(t *testing.T, ackWait, pinnedTTL time.Duration) *laneEnv {
	t.Helper()
	e := &laneEnv{t: t, names: streams.MustNames(""), ackWait: ackWait, pinnedTTL: pinnedTTL, heartbeat: 200 * time.Millisecond}
	e.srv = testutil.RunServer(t)
	_, e.js = testutil.JetStream(t, e.srv)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := streams.Ensure(ctx, e.js, streams.Config{}); err != nil {
		t.Fatal(err)
	}
	var err error
	e.cons, err = topology.EnsureLaneConsumer(ctx, e.js, e.names, topology.LaneConsumerSpec{
		TaskType: laneType, Lanes: 1, Lane: 0, AckWait: ackWait, PinnedTTL: pinnedTTL,
	})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// publish stores the task id of key (none when key is empty) on the
// key's slot and returns its stream sequence.
func (e *laneEnv) publish(key, id string) uint64 {
	e.t.Helper()
	slot := 0
	for _, c := range []byte(key) {
		slot = (slot*31 + int(c)) % 256
	}
	m := nats.NewMsg(e.names.OrderedSubject(laneType, slot))
	m.Data = []byte(id)
	if key != "" {
		m.Header.Set(ordering.HeaderKey, key)
	}
	ack, err := e.js.PublishMsg(e.t.Context(), m)
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Sequence
}

// gone reports whether the task stream no longer holds seq.
func (e *laneEnv) gone(ctx context.Context, seq uint64) (bool, error) {
	s, err := e.js.Stream(ctx, e.names.TaskStream())
	if err == nil {
		_, err = s.GetMsg(ctx, seq)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true, nil
	}
	return false, err
}

// stored returns how many tasks the task stream holds.
func (e *laneEnv) stored() uint64 {
	e.t.Helper()
	s, err := e.js.Stream(e.t.Context(), e.names.TaskStream())
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(e.t.Context())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// ptask is the fake worker's task handle: one delivery.
type ptask struct {
	m     *pull.Msg
	id    string // the payload
	group string // the ordering key, or the subject of a task without one
	seq   uint64
	n     uint64 // deliveries so far, this one included
}

// event is something that happened to a delivery in a fake worker.
type event struct {
	kind string // recv, offer, start, ack, nak, back, withdraw
	id   string
	n    uint64
}

// fake is a [Worker] over its own connection. Tasks offered get a slot
// (at most slots at once, 0 for no limit) and run handle on a goroutine of
// their own; handle's result decides the settlement: 0 acks, a delay naks
// with it. Both are reported to the runner, as are hand-backs.
type fake struct {
	t      *testing.T
	nc     *nats.Conn
	cons   jetstream.Consumer
	slots  int
	handle func(p *ptask) time.Duration
	// quit ends at cleanup: a handler holding a task returns then.
	quit     chan struct{}
	r        *Runner[*ptask]
	failOpen atomic.Int32 // Open fails this many times first
	ensured  atomic.Int32
	tasks    sync.WaitGroup

	mu      sync.Mutex
	log     []event
	waiting []*ptask // offered, without a slot
	running int
	byGroup map[string]int
	active  int // tasks in handle
	maxAct  int
	errs    []string
	beats   map[string]int
}

// newFake connects to e's server and returns a fake worker whose tasks
// run handle; cleanup releases held handlers, stops its runner and waits
// for its tasks.
func newFake(e *laneEnv, slots int, handle func(p *ptask) time.Duration) *fake {
	e.t.Helper()
	f := &fake{t: e.t, nc: testutil.Connect(e.t, e.srv), slots: slots, handle: handle, quit: make(chan struct{}),
		byGroup: map[string]int{}, beats: map[string]int{}}
	js, err := jetstream.New(f.nc)
	if err != nil {
		e.t.Fatal(err)
	}
	f.cons, err = js.Consumer(e.t.Context(), e.names.TaskStream(), e.cons.CachedInfo().Name)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() {
		close(f.quit)
		f.tasks.Wait()
	})
	return f
}

// config is the runner configuration of f's lane in e: ordered keys.
func (f *fake) config(e *laneEnv) RunnerConfig {
	return RunnerConfig{
		Consumer: f.cons, Group: topology.LaneGroup, PinnedTTL: e.pinnedTTL,
		Heartbeat: e.heartbeat, AckWait: e.ackWait, Gate: Config{Ordered: true},
		Key:  func(m *pull.Msg) string { return m.Headers().Get(ordering.HeaderKey) },
		Gone: e.gone,
		Log:  slog.New(slog.DiscardHandler),
	}
}

// start runs a runner of cfg for f until the returned stop is called
// (at cleanup at the latest); stop waits for Run to return.
func (f *fake) start(cfg RunnerConfig) (stop func()) {
	f.r = NewRunner[*ptask](f, cfg)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		f.r.Run(quit)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() { close(quit) })
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			f.t.Error("Run did not return after stop")
		}
	}
	f.t.Cleanup(stop)
	return stop
}

func (f *fake) note(kind string, p *ptask) {
	f.log = append(f.log, event{kind, p.id, p.n})
}

func (f *fake) Open(cons jetstream.Consumer) (*pull.Iter, error) {
	if f.failOpen.Add(-1) >= 0 {
		return nil, errors.New("open refused by the test")
	}
	info := cons.CachedInfo()
	return pull.NewIter(f.nc, info.Stream, info.Name, func() int { return info.Config.MaxAckPending }, nil)
}

func (f *fake) Close(it *pull.Iter) { it.Stop() }

func (f *fake) Ensure(context.Context) (jetstream.Consumer, error) {
	f.ensured.Add(1)
	return f.cons, nil
}

func (f *fake) Pending(m *pull.Msg) *ptask {
	p := &ptask{m: m, id: string(m.Data()), group: m.Headers().Get(ordering.HeaderKey)}
	if p.group == "" {
		p.group = "\x00" + m.Subject()
	}
	if d, err := m.Delivery(); err == nil {
		p.seq, p.n = d.StreamSeq, d.NumDelivered
	}
	f.mu.Lock()
	f.note("recv", p)
	f.mu.Unlock()
	return p
}

func (f *fake) Offer(p *ptask) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.note("offer", p)
	if f.slots > 0 && f.running >= f.slots {
		f.waiting = append(f.waiting, p)
		return
	}
	f.startLocked(p)
}

func (f *fake) startLocked(p *ptask) {
	f.running++
	f.tasks.Add(1)
	go f.exec(p)
}

func (f *fake) exec(p *ptask) {
	defer f.tasks.Done()
	f.mu.Lock()
	f.note("start", p)
	if f.byGroup[p.group]++; f.byGroup[p.group] > 1 {
		f.errs = append(f.errs, fmt.Sprintf("%s starts while its key runs %d", p.id, f.byGroup[p.group]-1))
	}
	f.active++
	f.maxAct = max(f.maxAct, f.active)
	f.mu.Unlock()

	d := f.handle(p)

	f.mu.Lock()
	f.byGroup[p.group]--
	f.active--
	f.mu.Unlock()
	kind, err := "ack", error(nil)
	if d > 0 {
		kind, err = "nak", p.m.NakWithDelay(d)
	} else {
		err = p.m.Ack()
	}
	f.mu.Lock()
	if err == nil {
		f.note(kind, p)
	}
	f.running--
	if len(f.waiting) > 0 && (f.slots == 0 || f.running < f.slots) {
		next := f.waiting[0]
		f.waiting = f.waiting[1:]
		f.startLocked(next)
	}
	f.mu.Unlock()
	f.r.Settled(p, d > 0)
}

func (f *fake) Withdraw(p *ptask) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := slices.Index(f.waiting, p)
	if i < 0 {
		return false
	}
	f.waiting = slices.Delete(f.waiting, i, i+1)
	f.note("withdraw", p)
	return true
}

// HandBack naks p and waits for the server to have processed the nak, as
// a worker's nak on a quiet connection reaches it before the worker goes on.
func (f *fake) HandBack(p *ptask, _ string) {
	if err := p.m.Nak(); err == nil && f.nc.Flush() == nil {
		f.mu.Lock()
		f.note("back", p)
		f.mu.Unlock()
	}
	f.r.Settled(p, true)
}

func (f *fake) Beat(p *ptask) {
	if err := p.m.InProgress(); err != nil {
		return
	}
	f.mu.Lock()
	f.beats[p.id]++
	f.mu.Unlock()
}

// events returns the events of kind (all when empty), in order.
func (f *fake) events(kind string) []event {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []event
	for _, ev := range f.log {
		if kind == "" || ev.kind == kind {
			out = append(out, ev)
		}
	}
	return out
}

// ids returns the ids of the events of kind, in order.
func (f *fake) ids(kind string) []string {
	var out []string
	for _, ev := range f.events(kind) {
		out = append(out, ev.id)
	}
	return out
}

// has reports whether f saw an event of kind for each of ids.
func (f *fake) has(kind string, ids ...string) bool {
	got := f.ids(kind)
	for _, id := range ids {
		if !slices.Contains(got, id) {
			return false
		}
	}
	return true
}

// waitFor waits until f saw an event of kind for each of ids.
func (f *fake) waitFor(timeout time.Duration, kind string, ids ...string) {
	f.t.Helper()
	testutil.Wait(f.t, timeout, fmt.Sprintf("%s of %v", kind, ids), func() bool { return f.has(kind, ids...) })
}

// index returns the position of the first event of kind for id in f's
// log, -1 if none.
func (f *fake) index(kind, id string) int {
	return slices.IndexFunc(f.events(""), func(ev event) bool { return ev.kind == kind && ev.id == id })
}

// checkRan fails the test for a key that ran two tasks at once.
func (f *fake) checkRan() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.errs {
		f.t.Error(e)
	}
}

// hold blocks until release closes or f's test ends.
func (f *fake) hold(release <-chan struct{}) {
	select {
	case <-release:
	case <-f.quit:
	}
}
