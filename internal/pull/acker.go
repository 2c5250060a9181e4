package pull

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Acker writes the plain acknowledgements of a worker's executors to the
// connection from one goroutine, each batch in stream order.
//
// An executor that publishes its own ack takes the connection's lock and
// kicks its flusher; with dozens of executors finishing no-op tasks the
// acks contend for that lock and leave the flusher writing a few bytes at
// a time. Queued here, they cost the executor a short lock of its own, and
// one goroutine publishes whatever queued meanwhile, sorted by stream
// sequence: the server removes a message acknowledged in order from the
// front of its block, without recording a deletion in the middle of it
// (docs/decisions/035-one-goroutine-writes-acks.md).
//
// T is what the failure callback gets back with the error: the caller's
// record of the task.
type Acker[T any] struct {
	nc     *nats.Conn
	failed func(T, error)

	// refused is set once the connection refused an ack for being
	// closed, which nats.go never undoes: later Acks fail at once. (Asking
	// the connection, nc.IsClosed, takes its lock for every ack; measured,
	// that cost more than the goroutine saves.)
	refused atomic.Bool

	mu     sync.Mutex
	queue  []queuedAck[T]
	closed bool
	wake   chan struct{} // cap 1: the queue is not empty
	done   chan struct{} // closed when the goroutine returns
}

type queuedAck[T any] struct {
	seq   uint64
	reply string
	v     T
}

// NewAcker starts the goroutine of an Acker on nc. failed is called, from
// that goroutine, for each queued ack the connection refused (it closed,
// or its reconnect buffer was full): the task will be redelivered after
// its ack wait.
func NewAcker[T any](nc *nats.Conn, failed func(T, error)) *Acker[T] {
	a := &Acker[T]{nc: nc, failed: failed, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go a.run()
	return a
}

// Ack acknowledges m, whose stream sequence is seq, on behalf of v. It
// marks m acknowledged and queues its ack, unless m was acknowledged
// already or the connection was found closed (the error is returned and m
// stays unacknowledged). An ack the connection refuses once queued is
// reported to the failure callback. After Close it publishes the ack
// itself.
func (a *Acker[T]) Ack(m *Msg, seq uint64, v T) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ackd {
		return jetstream.ErrMsgAlreadyAckd
	}
	if a.refused.Load() {
		return nats.ErrConnectionClosed
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return m.ackLocked(context.Background(), ackAckBody, false, true)
	}
	a.queue = append(a.queue, queuedAck[T]{seq: seq, reply: m.msg.Reply, v: v})
	select {
	case a.wake <- struct{}{}: // under mu: Close closes wake
	default:
	}
	a.mu.Unlock()
	m.ackd = true
	return nil
}

// Close publishes the acks still queued, stops the goroutine and waits for
// it. Acks after Close are published by their callers. Safe to call more
// than once.
func (a *Acker[T]) Close() {
	a.mu.Lock()
	if !a.closed {
		a.closed = true
		close(a.wake)
	}
	a.mu.Unlock()
	<-a.done
}

func (a *Acker[T]) run() {
	defer close(a.done)
	var batch []queuedAck[T]
	for range a.wake {
		batch = a.publish(batch)
	}
	// Every queued ack left a wake token, which range receives before it
	// sees the channel closed; this finds the queue empty unless that
	// ever changes.
	a.publish(batch)
}

// publish takes the queue (handing batch's array back for the next one)
// and publishes it in stream order.
func (a *Acker[T]) publish(batch []queuedAck[T]) []queuedAck[T] {
	a.mu.Lock()
	batch, a.queue = a.queue, batch[:0]
	a.mu.Unlock()
	if len(batch) > 1 {
		slices.SortFunc(batch, func(x, y queuedAck[T]) int { return cmp.Compare(x.seq, y.seq) })
	}
	for i := range batch {
		if err := a.nc.Publish(batch[i].reply, ackAckBody); err != nil {
			if errors.Is(err, nats.ErrConnectionClosed) {
				a.refused.Store(true)
			}
			if a.failed != nil {
				a.failed(batch[i].v, err)
			}
		}
		batch[i] = queuedAck[T]{} // drop the references for the collector
	}
	return batch
}
