package framework

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The worker sends its own pull requests instead of using the pull iterator
// of nats.go, for two reasons.
//
// A stored task can carry any header a producer chose. nats.go (v1.55.0)
// takes a delivered message with an empty body and a "Status" header for a
// status of the server: "Status: 409" ends the pull (the tasks fetched with
// it are dropped and come back with the poison on every redelivery), "100"
// and "404" are swallowed. The server's statuses differ from stored messages
// in one way a producer cannot forge: a delivery carries its "$JS.ACK..."
// reply subject, a status has none. pullIter tells them apart by that.
//
// One pull request is outstanding at a time, each on its own reply subject,
// so that a status (request expired, leadership changed) retires exactly the
// request it answers (deliveries carry the task's subject, not the
// request's: with several requests outstanding they could not be told
// apart). Each request asks for idle heartbeats: a request whose heartbeats
// stop (its consumer leader died, the connection was cut) is replaced after
// [pullHeartbeat] times two, not after an idle timer of half a minute.

// Pull request settings.
const (
	// pullHeartbeat is the idle heartbeat asked of the server for each
	// pull request. Two missed heartbeats mark the outstanding requests as
	// lost: the fetcher replaces them.
	pullHeartbeat = time.Second
	// pullExpires is how long a pull request waits on the server.
	pullExpires = 30 * time.Second
)

// errPullClosed reports a pull iterator that was stopped or drained and has
// nothing left.
var errPullClosed = jetstream.ErrMsgIteratorClosed

// pullIter fetches from one durable pull consumer with its own pull
// requests. It keeps at most size() messages requested or buffered, and asks
// for more once half of them were taken; size is read at each request, so a
// new size takes effect with the next request and nothing in flight is lost. Next is called from one goroutine;
// the subscription's handler runs on another.
type pullIter struct {
	nc    *nats.Conn
	api   string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	inbox string // request n is answered on inbox.n
	size  func() int
	// lost is called, without locks held, for each pull request given up
	// for missed heartbeats or retired by a leadership change.
	lost func()

	sub    *nats.Subscription
	notify chan struct{} // cap 1: something arrived

	mu        sync.Mutex
	cur       *pullReq    // the outstanding request, nil when none
	queue     []*nats.Msg // stored messages not yet taken by Next
	lastHeard time.Time   // last message or status from the server
	nextReq   uint64
	err       error // terminal: consumer deleted
	draining  bool
	stopped   bool
}

// pullReq is one outstanding pull request.
type pullReq struct {
	reply     string    // its reply subject
	remaining int       // messages it may still bring
	expiresAt time.Time // when the server retires it at the latest
}

// newPullIter subscribes to a fresh inbox for stream's consumer. lost is
// called when a request is given up.
func newPullIter(nc *nats.Conn, stream, consumer string, size func() int, lost func()) (*pullIter, error) {
	p := &pullIter{
		nc:     nc,
		api:    "$JS.API.CONSUMER.MSG.NEXT." + stream + "." + consumer,
		inbox:  nc.NewRespInbox(),
		size:   size,
		lost:   lost,
		notify: make(chan struct{}, 1),
	}
	sub, err := nc.Subscribe(p.inbox+".*", p.handle)
	if err != nil {
		return nil, fmt.Errorf("framework: pull %s: %w", consumer, err)
	}
	// Never drop a message for a slow handler: the buffer is bounded by the
	// requests (size), and heartbeats are tiny.
	_ = sub.SetPendingLimits(-1, -1)
	p.sub = sub
	return p, nil
}

// handle receives everything the server sends to the inbox.
func (p *pullIter) handle(m *nats.Msg) {
	p.mu.Lock()
	p.lastHeard = time.Now()
	if m.Reply != "" {
		// A stored message: deliveries always carry their ack subject,
		// whatever headers the producer gave them.
		if r := p.cur; r != nil {
			r.remaining--
			if r.remaining <= 0 {
				p.cur = nil
			}
		}
		p.queue = append(p.queue, m)
		p.mu.Unlock()
		p.wake()
		return
	}
	// A status of the server, answering the request of its subject.
	lost := false
	mine := p.cur != nil && p.cur.reply == m.Subject
	status := m.Header.Get("Status")
	desc := strings.ToLower(m.Header.Get("Description"))
	switch {
	case status == "100":
		// Idle heartbeat: the request is alive.
	case status == "409" && strings.Contains(desc, "consumer deleted"):
		p.err = jetstream.ErrConsumerDeleted
		p.cur = nil
	case !mine:
		// About an earlier request, already given up.
	case status == "409" && (strings.Contains(desc, "leadership change") || strings.Contains(desc, "server shutdown")):
		p.cur = nil
		lost = true
	default:
		// 408 request expired, 404, 409 batch completed or exceeded
		// limits: the request is done.
		p.cur = nil
	}
	p.mu.Unlock()
	if lost && p.lost != nil {
		p.lost()
	}
	p.wake()
}

func (p *pullIter) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// maintainLocked retires an expired or silent request and asks for more
// messages when none is outstanding and at most half a batch is buffered.
// It reports whether it gave up a silent request.
func (p *pullIter) maintainLocked(now time.Time) (lost bool, err error) {
	if r := p.cur; r != nil {
		switch {
		case now.After(r.expiresAt.Add(pullHeartbeat)):
			p.cur = nil // its expiry status was lost
		case now.Sub(p.lastHeard) > 2*pullHeartbeat:
			// Missed heartbeats: the request died with its consumer
			// leader or connection.
			p.cur = nil
			lost = true
		default:
			return false, nil
		}
	}
	if p.draining || p.stopped {
		return lost, nil
	}
	batch := max(p.size(), 1)
	if len(p.queue) > batch/2 {
		return lost, nil
	}
	want := batch - len(p.queue)
	body, err := json.Marshal(struct {
		Batch     int           `json:"batch"`
		Expires   time.Duration `json:"expires"`
		Heartbeat time.Duration `json:"idle_heartbeat"`
	}{want, pullExpires, pullHeartbeat})
	if err != nil {
		return lost, err
	}
	p.nextReq++
	reply := p.inbox + "." + strconv.FormatUint(p.nextReq, 10)
	if err := p.nc.PublishRequest(p.api, reply, body); err != nil {
		return lost, fmt.Errorf("framework: pull request: %w", err)
	}
	p.cur = &pullReq{reply: reply, remaining: want, expiresAt: now.Add(pullExpires)}
	p.lastHeard = now // the heartbeat clock starts with the request
	return lost, nil
}

// Next returns the next stored message, waiting up to wait. It returns
// nats.ErrTimeout when nothing came, [jetstream.ErrConsumerDeleted] when the
// consumer was deleted, and errPullClosed once a drained or stopped
// iterator is empty.
func (p *pullIter) Next(wait time.Duration) (jetstream.Msg, error) {
	deadline := time.Now().Add(wait)
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		now := time.Now()
		p.mu.Lock()
		if len(p.queue) > 0 {
			m := p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			p.mu.Unlock()
			return &pulledMsg{nc: p.nc, msg: m}, nil
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return nil, err
		}
		if p.stopped || (p.draining && !p.sub.IsValid()) {
			p.mu.Unlock()
			return nil, errPullClosed
		}
		lost, err := p.maintainLocked(now)
		p.mu.Unlock()
		if lost && p.lost != nil {
			p.lost()
		}
		if err != nil {
			return nil, err
		}
		left := deadline.Sub(now)
		if left <= 0 {
			return nil, nats.ErrTimeout
		}
		// Wake at least every heartbeat to check the requests.
		d := min(left, pullHeartbeat)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-p.notify:
			if !timer.Stop() {
				<-timer.C
			}
		case <-timer.C:
		}
	}
}

// Drain stops asking for messages and unsubscribes; Next still returns the
// messages received so far.
func (p *pullIter) Drain() {
	p.mu.Lock()
	p.draining = true
	p.mu.Unlock()
	_ = p.sub.Drain()
}

// Stop unsubscribes and hands back the messages received but not taken,
// for immediate redelivery.
func (p *pullIter) Stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	q := p.queue
	p.queue = nil
	p.mu.Unlock()
	_ = p.sub.Unsubscribe()
	for _, m := range q {
		_ = p.nc.Publish(m.Reply, ackNakBody)
	}
}

var (
	ackAckBody      = []byte("+ACK")
	ackNakBody      = []byte("-NAK")
	ackProgressBody = []byte("+WPI")
	ackTermBody     = []byte("+TERM")
)

// pulledMsg is a stored message delivered to a pullIter. It implements
// [jetstream.Msg] with the same acknowledgement protocol as nats.go.
type pulledMsg struct {
	nc  *nats.Conn
	msg *nats.Msg

	mu   sync.Mutex
	ackd bool
}

var _ jetstream.Msg = (*pulledMsg)(nil)

// Metadata parses the message's ack subject.
func (m *pulledMsg) Metadata() (*jetstream.MsgMetadata, error) {
	md, err := m.msg.Metadata()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", jetstream.ErrNotJSMessage, err)
	}
	return &jetstream.MsgMetadata{
		Sequence:     jetstream.SequencePair{Consumer: md.Sequence.Consumer, Stream: md.Sequence.Stream},
		NumDelivered: md.NumDelivered,
		NumPending:   md.NumPending,
		Timestamp:    md.Timestamp,
		Stream:       md.Stream,
		Consumer:     md.Consumer,
		Domain:       md.Domain,
	}, nil
}

func (m *pulledMsg) Data() []byte         { return m.msg.Data }
func (m *pulledMsg) Headers() nats.Header { return m.msg.Header }
func (m *pulledMsg) Subject() string      { return m.msg.Subject }
func (m *pulledMsg) Reply() string        { return m.msg.Reply }

func (m *pulledMsg) Ack() error { return m.ack(context.Background(), ackAckBody, false, true) }
func (m *pulledMsg) DoubleAck(ctx context.Context) error {
	return m.ack(ctx, ackAckBody, true, true)
}
func (m *pulledMsg) Nak() error { return m.ack(context.Background(), ackNakBody, false, true) }
func (m *pulledMsg) NakWithDelay(d time.Duration) error {
	if d <= 0 {
		return m.Nak()
	}
	return m.ack(context.Background(), fmt.Appendf(nil, "-NAK {\"delay\": %d}", d.Nanoseconds()), false, true)
}
func (m *pulledMsg) InProgress() error {
	return m.ack(context.Background(), ackProgressBody, false, false)
}
func (m *pulledMsg) Term() error { return m.ack(context.Background(), ackTermBody, false, true) }
func (m *pulledMsg) TermWithReason(reason string) error {
	if reason == "" {
		return m.Term()
	}
	return m.ack(context.Background(), append(append([]byte(nil), "+TERM "...), reason...), false, true)
}

func (m *pulledMsg) ack(ctx context.Context, body []byte, sync, final bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ackd {
		return jetstream.ErrMsgAlreadyAckd
	}
	var err error
	if sync {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
		}
		_, err = m.nc.RequestWithContext(ctx, m.msg.Reply, body)
	} else {
		err = m.nc.Publish(m.msg.Reply, body)
	}
	if err != nil {
		return err
	}
	if final {
		m.ackd = true
	}
	return nil
}

// newPull opens a pull iterator on cons of (tt, prio), counting lost pull
// requests in the worker's stats and reporting them to the PullLost hooks.
func (w *Worker) newPull(cons jetstream.Consumer, tt *typeRunner, prio Priority) (*pullIter, error) {
	info := cons.CachedInfo()
	size := func() int { return w.pullSize(tt, prio) } // pullsize.go
	return newPullIter(w.nc, info.Stream, info.Name, size, func() {
		w.stats.pullsLost.Add(1)
		w.log.Warn("jetflow pull request lost; replaced", slog.String(LogKeyTaskType, tt.name),
			slog.String(LogKeyPriority, prio.String()))
		w.emitPullLost(tt.name, prio)
	})
}

// emitPullLost calls the PullLost hooks.
func (w *Worker) emitPullLost(taskType string, prio Priority) {
	for i := range w.hooks {
		if h := w.hooks[i].PullLost; h != nil {
			callHook(w.log, &w.stats.hookPanics, "PullLost", func() { h(context.Background(), taskType, prio) })
		}
	}
}
