package fetch_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fetch"
	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/testutil"
)

// bound is every wait of these tests: generous, for a busy machine.
const bound = 30 * time.Second

// task is the tests' pending task.
type task struct {
	msg        jetstream.Msg
	feed       *fetch.Feed
	dispatched chan struct{}
}

func (t *task) data() string { return string(t.msg.Data()) }

// side is a worker for the tests: a scheduler with no slots of its own
// (the test dispatches tasks, or every offered one at once with auto) that
// records what the fetcher does on channels.
type side struct {
	t        *testing.T
	nc       *nats.Conn
	js       jetstream.JetStream
	consCfg  jetstream.ConsumerConfig
	size     int
	auto     bool
	failOpen atomic.Int32 // Open fails this many more times

	offered    chan *task         // every offered task
	handedBack chan *task         // every task handed back
	buffered   chan jetstream.Msg // every buffered message handed back
	opened     chan *pull.Iter    // every iterator opened
	ensured    chan struct{}      // every Ensure
	logged     chan string        // every log message

	loop *liveness.Loop // the fetcher's, set by run

	mu      sync.Mutex
	waiting map[*task]bool
}

var _ fetch.Worker[*task] = (*side)(nil)

// newSide starts a server with stream S (subjects s.>), stores msgs on
// it, and creates its durable consumer C with ackWait.
func newSide(t *testing.T, msgs []string, size int, ackWait time.Duration) *side {
	t.Helper()
	s := testutil.RunServer(t)
	nc := testutil.Connect(t, s)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: "S", Subjects: []string{"s.>"},
		Retention: jetstream.WorkQueuePolicy}); err != nil {
		t.Fatal(err)
	}
	sd := &side{
		t: t, nc: nc, js: js, size: size,
		consCfg:    jetstream.ConsumerConfig{Durable: "C", AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait},
		offered:    make(chan *task, 1000),
		handedBack: make(chan *task, 1000),
		buffered:   make(chan jetstream.Msg, 1000),
		opened:     make(chan *pull.Iter, 100),
		ensured:    make(chan struct{}, 100),
		logged:     make(chan string, 100),
		waiting:    make(map[*task]bool),
	}
	sd.publish(msgs...)
	return sd
}

// publish stores msgs on the stream.
func (s *side) publish(msgs ...string) {
	s.t.Helper()
	for _, m := range msgs {
		if _, err := s.js.Publish(s.t.Context(), "s.x", []byte(m)); err != nil {
			s.t.Fatal(err)
		}
	}
}

// consumer creates (or finds) consumer C.
func (s *side) consumer(ctx context.Context) (jetstream.Consumer, error) {
	return s.js.CreateOrUpdateConsumer(ctx, "S", s.consCfg)
}

// run starts a fetcher on consumer C and returns its stop function, which
// waits for Run to return.
func (s *side) run(ackWait time.Duration) (stop func()) {
	s.t.Helper()
	cons, err := s.consumer(s.t.Context())
	if err != nil {
		s.t.Fatal(err)
	}
	s.loop = new(liveness.Loops).Loop("C")
	f := fetch.New[*task](s, fetch.Config{
		Consumer: cons,
		Loop:     s.loop,
		Log:      slog.New(logTo(s.logged)),
		AckWait:  ackWait,
	})
	stopCh := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.Run(stopCh)
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(stopCh)
			select {
			case <-done:
			case <-time.After(bound):
				s.t.Fatal("the fetcher did not return after stop")
			}
		})
	}
	s.t.Cleanup(stop)
	return stop
}

func (s *side) Open(cons jetstream.Consumer, feed *fetch.Feed) (*pull.Iter, error) {
	if s.failOpen.Add(-1) >= 0 {
		return nil, errors.New("open failed (injected)")
	}
	info := cons.CachedInfo()
	it, err := pull.NewIter(s.nc, info.Stream, info.Name, func() int { return s.size }, nil)
	if err == nil {
		s.opened <- it
	}
	return it, err
}

func (s *side) Close(it *pull.Iter) { it.Stop() }

func (s *side) Ensure(ctx context.Context) (jetstream.Consumer, error) {
	s.ensured <- struct{}{}
	return s.consumer(ctx)
}

func (s *side) Pending(msg jetstream.Msg, feed *fetch.Feed) *task {
	return &task{msg: msg, feed: feed, dispatched: make(chan struct{}, 1)}
}

func (s *side) Offer(p *task) {
	s.mu.Lock()
	s.waiting[p] = true
	s.mu.Unlock()
	s.offered <- p
	if s.auto {
		if err := p.msg.Ack(); err != nil {
			s.t.Error(err)
		}
		s.dispatch(p)
	}
}

// dispatch grants p a slot, as the scheduler would.
func (s *side) dispatch(p *task) {
	s.mu.Lock()
	ok := s.waiting[p]
	delete(s.waiting, p)
	s.mu.Unlock()
	if ok {
		p.dispatched <- struct{}{}
	}
}

func (s *side) Dispatched(p *task) <-chan struct{} { return p.dispatched }

func (s *side) Withdraw(p *task) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	ok := s.waiting[p]
	delete(s.waiting, p)
	return ok
}

func (s *side) HandBack(p *task, why string) {
	if why != "worker stopping" {
		s.t.Errorf("task %s handed back for %q", p.data(), why)
	}
	_ = p.msg.Nak()
	s.handedBack <- p
}

func (s *side) HandBackBuffered(msg jetstream.Msg) {
	_ = msg.Nak()
	s.buffered <- msg
}

// recv returns the next value of ch, failing the test after bound.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(bound):
		t.Fatalf("no %s within %v", what, bound)
		panic("unreachable")
	}
}

// numbered returns "0" to "n-1".
func numbered(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint(i)
	}
	return s
}

// logTo is a log handler that sends every message to ch (dropped when ch
// is full).
type logTo chan string

func (h logTo) Enabled(context.Context, slog.Level) bool { return true }
func (h logTo) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h logTo) WithGroup(string) slog.Handler            { return h }
func (h logTo) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Message:
	default:
	}
	return nil
}
