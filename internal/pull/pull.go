package pull

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Iter sends its own pull requests instead of using the pull iterator of
// nats.go, for two reasons.
//
// A stored task can carry any header a producer chose. nats.go (v1.55.0)
// takes a delivered message with an empty body and a "Status" header for a
// status of the server: "Status: 409" ends the pull (the tasks fetched with
// it are dropped and come back with the poison on every redelivery), "100"
// and "404" are swallowed. The server's statuses differ from stored messages
// in one way a producer cannot forge: a delivery carries its "$JS.ACK..."
// reply subject, a status has none. Iter tells them apart by that.
//
// One pull request is outstanding at a time, each on its own reply subject,
// so that a status (request expired, leadership changed) retires exactly the
// request it answers (deliveries carry the task's subject, not the
// request's: with several requests outstanding they could not be told
// apart). Each request asks for idle heartbeats: a request whose heartbeats
// stop (its consumer leader died, the connection was cut) is replaced after
// [Heartbeat] times two, not after an idle timer of half a minute.

// Pull request settings.
const (
	// Heartbeat is the idle heartbeat asked of the server for each
	// pull request. Two missed heartbeats mark the outstanding requests as
	// lost: the fetcher replaces them.
	Heartbeat = time.Second
	// Expires is how long a pull request waits on the server.
	Expires = 30 * time.Second
)

// ErrClosed reports a pull iterator that was stopped or drained and has
// nothing left.
var ErrClosed = jetstream.ErrMsgIteratorClosed

// Iter fetches from one durable pull consumer with its own pull
// requests. It keeps at most size() messages requested or buffered, and asks
// for more once half of them were taken; size is read at each request, so a
// new size takes effect with the next request and nothing in flight is
// lost. Next is called from one goroutine; TryNext and Unget may be
// called from any; the subscription's handler runs on another.
type Iter struct {
	nc    *nats.Conn
	api   string // $JS.API.CONSUMER.MSG.NEXT.<stream>.<consumer>
	inbox string // request n is answered on inbox.n
	size  func() int
	// lost is called, without locks held, for each pull request given up
	// for missed heartbeats or retired by a leadership change.
	lost func()
	// direct, when set, is offered each stored message that arrives at an
	// empty queue (see [Iter.SetDirect]); guarded by mu.
	direct func(*Msg) bool
	// group, when set, is the priority group the requests name, and onPin
	// is told of each change of pin (see [Iter.SetGroup]); guarded by mu.
	group   string
	onPin   func(pinID string)
	expires time.Duration // of each request; 0 means Expires
	paused  bool          // no further requests (see Pause)

	sub    *nats.Subscription
	notify chan struct{} // cap 1: something arrived

	mu        sync.Mutex
	cur       *request  // the outstanding request, nil when none
	lastBatch int       // batch of the last request: refill below half of it
	queue     []*Msg    // stored messages not yet taken
	lastHeard time.Time // last message or status from the server
	alive     time.Time // last sign of a live consumer (see Alive)
	nextReq   uint64
	pin       string      // the consumer's pin held, "" when none (see PinID)
	err       error       // terminal: consumer deleted
	polled    time.Time   // see Polled; owned by the goroutine calling Next
	timer     *time.Timer // Next's wait, stopped between calls; owned likewise
	draining  bool
	// passing is set while a message Next returned has not been passed on
	// by its reader (see [Iter.Passed]); only with a direct path.
	passing bool
	// drained is set once the subscription's drain ended and its handler
	// returned for the last time: every message received is queued.
	drained bool
	stopped bool
}

// request is one outstanding pull request.
type request struct {
	reply     string    // its reply subject
	remaining int       // messages it may still bring
	expiresAt time.Time // when the server retires it at the latest
}

// NewIter subscribes to a fresh inbox for stream's consumer. lost is
// called when a request is given up.
func NewIter(nc *nats.Conn, stream, consumer string, size func() int, lost func()) (*Iter, error) {
	p := &Iter{
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
func (p *Iter) handle(m *nats.Msg) {
	now := time.Now()
	p.mu.Lock()
	p.lastHeard = now
	if m.Reply != "" {
		// A stored message: deliveries always carry their ack subject,
		// whatever headers the producer gave them.
		if onPin, pin := p.notePinLocked(m); onPin != nil {
			// Told before the message is handed out.
			p.mu.Unlock()
			onPin(pin)
			p.mu.Lock()
		}
		if r := p.cur; r != nil {
			r.remaining--
			if r.remaining <= 0 {
				p.cur = nil
			}
		}
		q := &Msg{nc: p.nc, msg: m}
		q.beat.Store(now.UnixNano())
		p.alive = now
		if p.takeDirectLocked(q, now) {
			p.mu.Unlock()
			return
		}
		p.queue = append(p.queue, q)
		p.mu.Unlock()
		p.wake()
		return
	}
	// A status of the server, answering the request of its subject.
	lost := false
	var onPin func(string)
	mine := p.cur != nil && p.cur.reply == m.Subject
	status := m.Header.Get("Status")
	desc := strings.ToLower(m.Header.Get("Description"))
	if status != "503" && !(status == "409" && (strings.Contains(desc, "consumer deleted") ||
		strings.Contains(desc, "leadership change") || strings.Contains(desc, "server shutdown"))) {
		// An idle heartbeat (100), or a request ended by the consumer (404
		// no messages, 408 expired, 409 batch completed): the consumer
		// answers. 503 means no one serves the consumer's API subject (no
		// consumer, no stream).
		p.alive = p.lastHeard
	}
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
	case status == "423":
		// The request's pin ID is not the consumer's pin: the request is
		// done, and the pin lost (see SetGroup).
		onPin = p.forgetPinLocked()
		p.cur = nil
	default:
		// 408 request expired, 404, 409 batch completed or exceeded
		// limits: the request is done.
		p.cur = nil
	}
	p.mu.Unlock()
	if lost && p.lost != nil {
		p.lost()
	}
	if onPin != nil {
		onPin("")
	}
	p.wake()
}

// SetDirect installs the direct path: a stored message that arrives while
// nothing is queued, and the iterator neither drains, stopped nor failed, is
// first offered to direct, which either takes it (true: it is the caller's
// now, as if returned by Next) or leaves it to the queue (false). direct runs
// on the subscription's goroutine with the iterator's lock held, so [Iter.Drain]
// and [Iter.Stop] return only after a call in progress: it must be quick and
// must not call the iterator. Set it before the first Next.
//
// With a direct path set, a message Next returns goes before any that
// TryNext or the direct path would give: both give nothing until the reader
// calls [Iter.Passed] (or Next again), so that a message taken by the reader
// is queued wherever it goes before a later one can overtake it.
func (p *Iter) SetDirect(direct func(*Msg) bool) {
	p.mu.Lock()
	p.direct = direct
	p.mu.Unlock()
}

// takeDirectLocked offers q to the direct path; when taken, it asks for the
// next batch if the last request brought all it could (as popLocked does).
func (p *Iter) takeDirectLocked(q *Msg, now time.Time) bool {
	if p.direct == nil || p.passing || len(p.queue) > 0 || p.draining || p.stopped || p.err != nil || !p.direct(q) {
		return false
	}
	if p.cur == nil {
		// Errors surface in the next Next, which runs maintainLocked again.
		_, _ = p.maintainLocked(now)
	}
	return true
}

func (p *Iter) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

// maintainLocked retires an expired or silent request and asks for more
// messages when none is outstanding and at most half a batch is buffered.
// It reports whether it gave up a silent request.
func (p *Iter) maintainLocked(now time.Time) (lost bool, err error) {
	if r := p.cur; r != nil {
		switch {
		case now.After(r.expiresAt.Add(Heartbeat)):
			p.cur = nil // its expiry status was lost
		case now.Sub(p.lastHeard) > 2*Heartbeat:
			// Missed heartbeats: the request died with its consumer
			// leader or connection.
			p.cur = nil
			lost = true
		default:
			return false, nil
		}
	}
	if p.draining || p.stopped || p.paused {
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
		Group     string        `json:"group,omitempty"`
		Pin       string        `json:"id,omitempty"`
	}{want, p.expiresOrDefault(), min(Heartbeat, p.expiresOrDefault()/2), p.group, p.pin})
	if err != nil {
		return lost, err
	}
	p.nextReq++
	reply := p.inbox + "." + strconv.FormatUint(p.nextReq, 10)
	if err := p.nc.PublishRequest(p.api, reply, body); err != nil {
		return lost, fmt.Errorf("framework: pull request: %w", err)
	}
	p.cur = &request{reply: reply, remaining: want, expiresAt: now.Add(p.expiresOrDefault())}
	p.lastBatch = batch
	p.lastHeard = now // the heartbeat clock starts with the request
	return lost, nil
}

// popLocked takes the first queued message. When the last request brought
// all it could and at most half a batch is left, it asks for the next batch
// at once, so that the server delivers while the queue drains (it reports
// a request that could not be sent in the iterator's next wait).
func (p *Iter) popLocked(now time.Time) *Msg {
	q := p.queue[0]
	p.queue[0] = nil
	p.queue = p.queue[1:]
	if p.cur == nil && len(p.queue) <= p.lastBatch/2 && p.err == nil {
		// Errors and lost requests surface in the next Next that finds the
		// queue empty: maintainLocked runs again there.
		if now.IsZero() {
			now = time.Now()
		}
		_, _ = p.maintainLocked(now)
	}
	return q
}

// Alive returns when the server last showed that the consumer serves this
// iterator's requests: a stored message, an idle heartbeat, or a request
// it ended (no messages, expired). Zero before the first. A request nobody
// answers (a deleted stream, a dead consumer leader) does not count.
func (p *Iter) Alive() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.alive
}

// Next returns the next stored message, waiting up to wait. It returns
// nats.ErrTimeout when nothing came, [jetstream.ErrConsumerDeleted] when the
// consumer was deleted, and ErrClosed once a drained or stopped
// iterator is empty.
func (p *Iter) Next(wait time.Duration) (jetstream.Msg, error) {
	now := time.Now()
	deadline := now.Add(wait)
	for {
		p.polled = now
		p.mu.Lock()
		p.passing = false
		if len(p.queue) > 0 {
			q := p.popLocked(now)
			p.passing = p.direct != nil
			p.mu.Unlock()
			return q, nil
		}
		if p.err != nil {
			err := p.err
			p.mu.Unlock()
			return nil, err
		}
		if p.stopped || p.drained {
			p.mu.Unlock()
			return nil, ErrClosed
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
		// Wake at least every heartbeat to check the requests. The timer
		// is the iterator's, reused from call to call (since Go 1.23 a
		// stopped or reset timer delivers no stale tick).
		d := min(left, Heartbeat)
		if p.timer == nil {
			p.timer = time.NewTimer(d)
		} else {
			p.timer.Reset(d)
		}
		select {
		case <-p.notify:
			p.timer.Stop()
		case <-p.timer.C:
		}
		now = time.Now()
	}
}

// Passed tells the iterator that the reader passed on the message Next
// returned last (see [Iter.SetDirect]).
func (p *Iter) Passed() {
	p.mu.Lock()
	p.passing = false
	p.mu.Unlock()
}

// TryNext returns the next stored message without waiting, or nil when the
// queue is empty, the reader has not passed on the message Next returned
// ([Iter.SetDirect]), or the iterator drains, stopped or failed. Unlike Next it
// may be called from any goroutine, concurrently with Next: it is how an
// executor that finished a task takes the next one directly (the worker's
// fetcher still owns the iterator's waits and errors).
func (p *Iter) TryNext() *Msg { return p.TakeIf(func(*Msg) bool { return true }) }

// TakeIf is TryNext for a taker that must place the message before anyone
// else can take one: take is called with the next stored message, with the
// iterator's lock held, and the message is taken only if take returns true;
// otherwise it stays at the head of the queue (nil is returned). take must
// be quick and must not call the iterator.
func (p *Iter) TakeIf(take func(*Msg) bool) *Msg {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) == 0 || p.passing || p.draining || p.stopped || p.err != nil || !take(p.queue[0]) {
		return nil
	}
	return p.popLocked(time.Time{})
}

// Unget puts m, taken with TryNext or Next and not acknowledged, back at the
// head of the queue, where it keeps its heartbeats. It returns false when
// the iterator stopped meanwhile: the caller then hands m back itself.
func (p *Iter) Unget(m *Msg) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return false
	}
	p.queue = append(p.queue, nil)
	copy(p.queue[1:], p.queue)
	p.queue[0] = m
	return true
}

// Queued returns how many received messages wait in the iterator to be
// taken (by Next or TryNext).
func (p *Iter) Queued() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue)
}

// Polled returns when the last call of Next last looked for a message: the
// clock reading it took anyway, for callers that record their loop's
// progress. Call it from the goroutine that calls Next.
func (p *Iter) Polled() time.Time { return p.polled }

// Drain stops asking for messages and unsubscribes; Next still returns the
// messages received so far, then ErrClosed once the subscription's handler
// has queued the last of them (its closed handler runs after it).
func (p *Iter) Drain() {
	p.mu.Lock()
	p.draining = true
	p.mu.Unlock()
	done := func(string) {
		p.mu.Lock()
		p.drained = true
		p.mu.Unlock()
		p.wake()
	}
	p.sub.SetClosedHandler(done)
	if err := p.sub.Drain(); err != nil {
		done("") // closed already (its connection closed): nothing more comes
	}
}

// Stop unsubscribes and hands back the messages received but not taken,
// for immediate redelivery.
func (p *Iter) Stop() {
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
		_ = m.Nak()
	}
}
