package intake

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/attempt"
	"github.com/jetflow-io/jetflow/internal/dispatch"
	"github.com/jetflow-io/jetflow/internal/fetch"
	"github.com/jetflow-io/jetflow/internal/lanes"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/settle"
	"github.com/jetflow-io/jetflow/streams"
)

// Type is a registered task type as the stage sees it; T is the worker's
// own registration of it ([Type].Ext). Fill it before [Stage.Add] and
// change it no more.
type Type[T any] struct {
	// Spec is what its consumers are made of ([Plan]).
	Spec
	// Heartbeat is how often the server is told that its held tasks are
	// alive.
	Heartbeat time.Duration
	// Concurrency is its share of the worker's slots; with Prefetch (the
	// user's pull size when PrefetchSet) and the consumers' MaxInFlight it
	// sizes its pulls (pull.Batch).
	Concurrency, Prefetch int
	PrefetchSet           bool
	// Lanes is the number of lanes of a type ordered in lanes, Gate the
	// policy of their keys (see [LaneGate]).
	Lanes int
	Gate  lanes.Config
	// Slots is its concurrency on the worker, set by [Stage.Add].
	Slots *dispatch.Class
	// Pace measures its handler times for its pull size.
	Pace pull.Pace
	// Ext is the worker's own registration of the type.
	Ext T
}

// Source is one consumer a stage pulls: a (type, priority) consumer of
// [Stage.Ensure], or one the worker adds (ordered partitions, lanes).
type Source[T any] struct {
	Type *Type[T]
	Prio streams.Priority
	// Cons is the consumer, ensured; Ensure ensures it again after a
	// failed pull.
	Cons   jetstream.Consumer
	Ensure func(ctx context.Context) (jetstream.Consumer, error)
	// Lane is set for a lane of an ordered type, in task partition Part.
	Lane bool
	Part int
}

// Pending is one fetched message, from the moment it leaves the pull
// buffer until its outcome is settled; X is the worker's part of it (the
// public task and its contexts), allocated with it: one allocation per
// task, whose size class counts.
type Pending[T, X any] struct {
	// Type is the task's type, Msg its delivery.
	Type *Type[T]
	Msg  jetstream.Msg
	// dispatched receives once when a slot is granted: set for a task that
	// is offered to the scheduler, nil for one taken directly from a pull
	// buffer (takeBuffered), which never waits for a grant.
	dispatched chan struct{}
	// src is the fetcher's feed the task came from, nil for a task of a
	// rescued or closing pull buffer.
	src *fetch.Feed
	// lastBeat is when the server last heard of this delivery (receipt or
	// InProgress), in Unix nanoseconds; the heartbeat sweeper reads it.
	lastBeat atomic.Int64
	// Prio, rerun and settled share one word.
	Prio streams.Priority
	// rerun is set while the task is parked: its next execution reruns
	// the handler rather than starting the task.
	rerun   bool
	settled atomic.Bool // set by whoever acks/naks/terms first
	// lane is the runner of the lane the task came from, nil for other
	// tasks.
	lane *lanes.Runner[*Pending[T, X]]
	// X is the worker's part.
	X X
}

// newPending returns the pending task of msg, fetched from a consumer of
// (t, prio), to be offered to the scheduler.
func newPending[T, X any](t *Type[T], prio streams.Priority, msg jetstream.Msg) *Pending[T, X] {
	p := &Pending[T, X]{Type: t, Prio: prio, Msg: msg, dispatched: make(chan struct{}, 1)}
	var beat time.Time
	if pm, ok := msg.(*pull.Msg); ok {
		// Its ack clock runs from its arrival or last heartbeat in the
		// pull buffer (internal/heartbeat), not from now.
		beat = pm.LastBeat()
	}
	if beat.IsZero() {
		beat = time.Now()
	}
	p.lastBeat.Store(beat.UnixNano())
	return p
}

// bufferedPending returns the pending task of m, taken from the pull buffer
// that f publishes, with the heartbeat stamp m got there.
func bufferedPending[T, X any](t *Type[T], prio streams.Priority, m *pull.Msg, f *fetch.Feed) *Pending[T, X] {
	p := &Pending[T, X]{Type: t, Prio: prio, Msg: m, src: f}
	p.lastBeat.Store(m.LastBeat().UnixNano())
	return p
}

// Claim claims p's settlement: false when it was settled already (by its
// executor, or handed back).
func (p *Pending[T, X]) Claim() bool { return p.settled.CompareAndSwap(false, true) }

// Resumed reports whether p was parked, and clears the mark.
func (p *Pending[T, X]) Resumed() bool {
	r := p.rerun
	p.rerun = false
	return r
}

// Orphaned reports whether p came from a lane the worker no longer holds:
// held, it goes back for the lane's new owner.
func (p *Pending[T, X]) Orphaned() bool { return p.lane != nil && !p.lane.Holds() }

// LaneSettled tells p's lane, if any, that p was settled: redelivered when
// it went back to the server.
func (p *Pending[T, X]) LaneSettled(redelivered bool) {
	if p.lane != nil {
		p.lane.Settled(p, redelivered)
	}
}

// Redelivered reports whether a settlement leaves the task to be
// delivered again: a retry, a hand-back, a dead letter not written, an
// ack not sent.
func Redelivered(s attempt.Settlement) bool {
	switch s.Decision.Action {
	case settle.Retry, settle.HandBack:
		return true
	case settle.Ack:
		return !s.Carried.Sent
	}
	return s.Carried.DeadLetterErr != nil
}

// Clock, InProgress and Beaten are p's side of the heartbeat sweeper
// (heartbeat.Task).
func (p *Pending[T, X]) Clock() (time.Duration, int64, bool) {
	return p.Type.Heartbeat, p.lastBeat.Load(), p.settled.Load()
}

// InProgress tells the server that p is alive.
func (p *Pending[T, X]) InProgress() error { return p.Msg.InProgress() }

// Beaten records a heartbeat sent at stamp.
func (p *Pending[T, X]) Beaten(stamp int64) { p.lastBeat.Store(stamp) }
