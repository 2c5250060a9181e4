package asyncpub

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrTimeout reports an acknowledgement that did not come within the
// window's timeout; it is [jetstream.ErrAsyncPublishTimeout], so that the
// callers' classification of nats.go's own timeout applies.
var ErrTimeout = jetstream.ErrAsyncPublishTimeout

// ErrReplySet reports a message given to [Window.Publish] with a reply
// subject of its own.
var ErrReplySet = errors.New("asyncpub: message has a reply subject")

// Window is an asynchronous publisher with at most Size messages awaiting
// their acknowledgement. Publish and Wait may run on different goroutines,
// one each at a time.
type Window struct {
	nc      *nats.Conn
	sub     *nats.Subscription
	prefix  string // the inbox, with its trailing dot
	stream  string // the stream name acknowledgements share
	timeout time.Duration
	room    chan struct{} // a token per message in flight
	wake    chan struct{} // an acknowledgement for the waiter arrived
	timer   *time.Timer   // the waiter's deadline
	buf     []byte        // the reply subject being built (the publisher's)
	next    uint64        // the next sequence (the publisher's)

	mu      sync.Mutex
	slots   []slot
	waiting uint64 // the sequence the waiter waits for, plus one; 0: none
}

// slot is the state of one message in flight.
type slot struct {
	seq   uint64
	state slotState
	sent  time.Time
	ack   Ack
	err   error
}

type slotState uint8

const (
	free slotState = iota
	sent           // published, awaiting its acknowledgement
	done           // acknowledged (ack or err set), awaiting its waiter
)

// Open subscribes to a fresh inbox of nc and returns a window of size
// messages (at least 1). An acknowledgement that does not come within
// timeout fails with [ErrTimeout]. stream is the name the acknowledgements
// are expected to carry (see [ParseAck]). Close the window when done.
func Open(nc *nats.Conn, size int, timeout time.Duration, stream string) (*Window, error) {
	size = max(size, 1)
	w := &Window{
		nc:      nc,
		prefix:  nc.NewInbox() + ".",
		stream:  stream,
		timeout: timeout,
		room:    make(chan struct{}, size),
		wake:    make(chan struct{}, 1),
		timer:   time.NewTimer(time.Hour),
		slots:   make([]slot, size),
	}
	w.timer.Stop()
	sub, err := nc.Subscribe(w.prefix+"*", w.received)
	if err != nil {
		return nil, err
	}
	// A window's replies never exceed its size; keep nats.go's message
	// limit out of the way of a large one.
	if err := sub.SetPendingLimits(max(size, nats.DefaultSubPendingMsgsLimit), nats.DefaultSubPendingBytesLimit); err != nil {
		_ = sub.Unsubscribe()
		return nil, err
	}
	w.sub = sub
	return w, nil
}

// Close unsubscribes. Acknowledgements still in flight are dropped.
func (w *Window) Close() {
	w.timer.Stop()
	_ = w.sub.Unsubscribe()
}

// Publish sends m and returns its sequence for [Window.Wait], waiting while
// the window is full until ctx ends. m must have no reply subject: Publish
// sets it. On an error nothing was sent.
func (w *Window) Publish(ctx context.Context, m *nats.Msg) (uint64, error) {
	if m.Reply != "" {
		return 0, ErrReplySet
	}
	select {
	case w.room <- struct{}{}:
	default:
		select {
		case w.room <- struct{}{}:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	seq := w.next
	s := &w.slots[seq%uint64(len(w.slots))]
	now := time.Now()
	w.mu.Lock()
	if s.state != free {
		w.mu.Unlock()
		<-w.room
		return 0, errWaitOrder
	}
	s.seq, s.state, s.sent = seq, sent, now
	w.mu.Unlock()
	w.buf = strconv.AppendUint(append(w.buf[:0], w.prefix...), seq, 36)
	m.Reply = string(w.buf)
	if err := w.nc.PublishMsg(m); err != nil {
		// Nothing was sent: the sequence is the next message's, so that
		// the sequences in flight stay contiguous.
		m.Reply = ""
		w.release(s)
		return 0, err
	}
	w.next++
	return seq, nil
}

// closedCheckInterval is how often a waiter looks whether the connection
// was closed (nats.go tells a connection's subscriptions nothing then; its
// closed handler is the application's).
const closedCheckInterval = 100 * time.Millisecond

// errWaitOrder reports a misuse: messages waited for out of publish order.
var errWaitOrder = errors.New("asyncpub: acknowledgements must be waited for in publish order")

// Wait returns the acknowledgement of the message published as seq, or
// why there is none: the server's error, [ErrTimeout], the connection's
// close, or ctx's end. Either way the message's slot is free again. Wait
// for the messages in the order they were published: the slots in flight
// are then always the sequences from the oldest, without holes.
func (w *Window) Wait(ctx context.Context, seq uint64) (Ack, error) {
	s := &w.slots[seq%uint64(len(w.slots))]
	for {
		w.mu.Lock()
		if s.seq != seq || s.state == free {
			w.mu.Unlock()
			return Ack{}, errWaitOrder
		}
		if s.state == done {
			ack, err := s.ack, s.err
			w.waiting = 0
			w.mu.Unlock()
			w.release(s)
			return ack, err
		}
		w.waiting = seq + 1
		left := w.timeout - time.Since(s.sent)
		w.mu.Unlock()
		switch {
		case left <= 0:
			w.release(s)
			return Ack{}, ErrTimeout
		case w.nc.IsClosed():
			w.release(s)
			return Ack{}, nats.ErrConnectionClosed
		}
		w.timer.Reset(min(left, closedCheckInterval))
		select {
		case <-w.wake:
			w.timer.Stop()
		case <-w.timer.C:
			// The loop looks again: the acknowledgement may have come
			// just now, the deadline passed, or the connection closed.
		case <-ctx.Done():
			w.timer.Stop()
			w.release(s)
			return Ack{}, ctx.Err()
		}
	}
}

// release frees s and its token in the window.
func (w *Window) release(s *slot) {
	w.mu.Lock()
	*s = slot{}
	w.waiting = 0
	w.mu.Unlock()
	<-w.room
}

// received is the subscription's handler: it records the acknowledgement
// in its slot and wakes the waiter if it waits for it. Replies to unknown
// or settled sequences are dropped.
func (w *Window) received(m *nats.Msg) {
	if len(m.Subject) <= len(w.prefix) {
		return
	}
	seq, err := strconv.ParseUint(m.Subject[len(w.prefix):], 36, 64)
	if err != nil {
		return
	}
	ack, aerr := ParseAck(m, w.stream)
	w.mu.Lock()
	s := &w.slots[seq%uint64(len(w.slots))]
	if s.seq != seq || s.state != sent {
		w.mu.Unlock()
		return
	}
	s.ack, s.err, s.state = ack, aerr, done
	wake := w.waiting == seq+1
	w.mu.Unlock()
	if wake {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
}
