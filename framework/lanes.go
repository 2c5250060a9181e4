package framework

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/attempt"
	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/lanes"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/settle"
	"github.com/jetflow-io/jetflow/internal/topology"
)

// Lanes ([Ordering].Lanes): an ordered type's slots read by a few lane
// consumers, each pinned to one worker, whose runner (internal/lanes)
// starts each key's tasks in stream order, one at a time, through the
// worker's scheduler (decision 049). The worker reports every settlement
// of a lane's task to its runner (laneSettled), which may start the key's
// next task.

// laneSide is the worker as a lane's runner sees it ([lanes.Worker]).
type laneSide struct {
	w           *Worker
	s           consumerSub
	r           *lanes.Runner[*pending]
	lane, lanes int
}

var _ lanes.Worker[*pending] = (*laneSide)(nil)

// runLane runs the lane of consumer s until the worker stops fetching.
func (w *Worker) runLane(s consumerSub) {
	defer w.fetchers.Done()
	info := s.cons.CachedInfo()
	lane, _, _ := topology.ParseLane(info.Config.Metadata) // the worker's own consumer
	side := &laneSide{w: w, s: s, lane: lane, lanes: s.tt.cfg.ordering.Lanes}
	side.r = lanes.NewRunner[*pending](side, lanes.RunnerConfig{
		Consumer:  s.cons,
		Group:     topology.LaneGroup,
		PinnedTTL: info.Config.PinnedTTL,
		Heartbeat: s.tt.cfg.heartbeat,
		AckWait:   s.tt.cfg.ackWait,
		Gate:      laneGate(s.tt.cfg.ordering),
		Key: func(m *pull.Msg) string {
			k := m.Headers().Get(ordering.HeaderKey)
			if ordering.ValidateKey(k) != nil {
				return ""
			}
			return k
		},
		Gone: func(ctx context.Context, seq uint64) (bool, error) {
			stream, err := w.js.Stream(ctx, info.Stream)
			if err == nil {
				_, err = stream.GetMsg(ctx, seq)
			}
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return true, nil
			}
			return false, err
		},
		Candidate: func() bool { return w.lanes.Owns(s.tt.name, lane, s.tt.cfg.ordering.Lanes) },
		Unpin: func(ctx context.Context) error {
			stream, err := w.js.Stream(ctx, info.Stream)
			if err != nil {
				return err
			}
			return stream.UnpinConsumer(ctx, info.Name, topology.LaneGroup)
		},
		Log:  w.log.With(slog.String(LogKeyTaskType, s.tt.name), slog.String("lane", info.Name)),
		Loop: w.health.Loop(w.names.ConsumerName(s.tt.name, s.prio)),
	})
	w.laneSides.Store(side, struct{}{})
	defer w.laneSides.Delete(side)
	side.r.Run(w.stopFetch)
}

// heldLanesBytes bounds the lanes' share of the worker's registry record
// (fleet.MaxRecordBytes in all): a record over it would not be written, and
// the worker would leave the registry.
const heldLanesBytes = 24 << 10

// heldLanes lists the lanes the worker holds now, for its registry record
// (fleet.go): those the server pinned to it, within heldLanesBytes.
func (w *Worker) heldLanes() []fleet.Lane {
	var out []fleet.Lane
	w.laneSides.Range(func(k, _ any) bool {
		l := k.(*laneSide)
		st := l.r.Status()
		if !fleet.ValidPin(st.Pin) {
			return true
		}
		h := fleet.Lane{Type: l.s.tt.name, Partition: l.s.part, Lane: l.lane, Lanes: l.lanes, Pin: st.Pin,
			Open: st.Open, Running: st.Running, Queued: st.Queued, Awaited: st.Awaited, Keys: st.Keys}
		for _, k := range st.Busiest {
			// A task without a valid key is held under its subject.
			if validateOrderingKey(k.Key) == nil && len(h.Busiest) < fleet.MaxLaneKeys {
				h.Busiest = append(h.Busiest, fleet.LaneKey{Key: k.Key, Running: k.Running, Queued: k.Waiting})
			}
		}
		out = append(out, h)
		return true
	})
	slices.SortFunc(out, func(a, b fleet.Lane) int {
		return cmp.Or(strings.Compare(a.Type, b.Type), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Lane, b.Lane))
	})
	return fleet.FitLanes(out, heldLanesBytes)
}

// Open opens a pull iterator on the lane: no direct starts (every task
// passes the runner's gate), the sweeper beats its buffer.
func (l *laneSide) Open(cons jetstream.Consumer) (*pull.Iter, error) {
	w, tt := l.w, l.s.tt
	info := cons.CachedInfo()
	it, err := pull.NewIter(w.nc, info.Stream, info.Name, func() int { return info.Config.MaxAckPending }, func() {
		w.stats.pullsLost.Add(1)
		w.emitPullLost(tt.name, PriorityNormal)
	})
	if err != nil {
		return nil, err
	}
	w.bg.beats.Watch(it, tt.cfg.heartbeat, func(m *pull.Msg, err error) {
		w.ackFailed(context.Background(), nil, newPending(tt, PriorityNormal, m), "in_progress", err)
	})
	return it, nil
}

// Close stops it and ends its heartbeats.
func (l *laneSide) Close(it *pull.Iter) {
	it.Stop()
	l.w.bg.beats.Unwatch(it)
}

// Ensure re-creates the lane's consumer.
func (l *laneSide) Ensure(ctx context.Context) (jetstream.Consumer, error) { return l.s.ensure(ctx) }

// Pending returns the task of m, which reports its settlement to the lane.
func (l *laneSide) Pending(m *pull.Msg) *pending {
	p := newPending(l.s.tt, PriorityNormal, m)
	p.lane = l.r
	return p
}

// Offer queues p for a slot.
func (l *laneSide) Offer(p *pending) { l.w.offer(p) }

// Withdraw takes p out of the waiting tasks; false if it got a slot.
func (l *laneSide) Withdraw(p *pending) bool { return l.w.withdraw(p) }

// HandBack naks p.
func (l *laneSide) HandBack(p *pending, why string) { l.w.handBack(p, why) }

// Beat sends InProgress for p, queued behind its key.
func (l *laneSide) Beat(p *pending) {
	if err := p.msg.InProgress(); err != nil {
		l.w.ackFailed(context.Background(), nil, p, "in_progress", err)
	}
}

// laneSettled tells p's lane, if any, that p was settled: redelivered when
// it went back to the server.
func laneSettled(p *pending, redelivered bool) {
	if p.lane != nil {
		p.lane.Settled(p, redelivered)
	}
}

// redelivered reports whether a settlement leaves the task to be
// delivered again: a retry, a hand-back, a dead letter not written, an
// ack not sent.
func redelivered(s attempt.Settlement) bool {
	switch s.Decision.Action {
	case settle.Retry, settle.HandBack:
		return true
	case settle.Ack:
		return !s.Carried.Sent
	}
	return s.Carried.DeadLetterErr != nil
}

// laneGate returns the policy of the lanes of ordering o: one task of a key
// at a time in strict order, or a cap per key (PerKey above 1, or Limit).
func laneGate(o *Ordering) lanes.Config {
	perKey := max(o.PerKey, 1)
	if perKey == 1 && o.Limit == nil {
		return lanes.Config{Ordered: true}
	}
	limit := o.Limit
	return lanes.Config{Limit: func(key string) int {
		if limit != nil {
			if n := limit(key); n > 0 {
				return n
			}
		}
		return perKey
	}}
}
