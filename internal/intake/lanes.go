package intake

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/lanes"
	"github.com/jetflow-io/jetflow/internal/ordering"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
)

// Lanes: an ordered type's slots read by a few lane consumers, each pinned
// to one worker, whose runner (internal/lanes) starts each key's tasks in
// stream order, one at a time, through the worker's scheduler (decision
// 049). Every settlement of a lane's task is reported to its runner
// ([Pending.LaneSettled]), which may start the key's next task.

// laneSide is the stage as a lane's runner sees it ([lanes.Worker]).
type laneSide[T, X any] struct {
	s           *Stage[T, X]
	src         Source[T]
	r           *lanes.Runner[*Pending[T, X]]
	lane, lanes int
}

// runLane runs the lane of consumer src until Stop.
func (s *Stage[T, X]) runLane(src Source[T]) {
	info := src.Cons.CachedInfo()
	lane, _, _ := topology.ParseLane(info.Config.Metadata) // the worker's own consumer
	t := src.Type
	side := &laneSide[T, X]{s: s, src: src, lane: lane, lanes: t.Lanes}
	side.r = lanes.NewRunner[*Pending[T, X]](side, lanes.RunnerConfig{
		Consumer:  src.Cons,
		Group:     topology.LaneGroup,
		PinnedTTL: info.Config.PinnedTTL,
		Heartbeat: t.Heartbeat,
		AckWait:   t.AckWait,
		Gate:      t.Gate,
		Key: func(m *pull.Msg) string {
			k := m.Headers().Get(ordering.HeaderKey)
			if ordering.ValidateKey(k) != nil {
				return ""
			}
			return k
		},
		Gone: func(ctx context.Context, seq uint64) (bool, error) {
			stream, err := s.cfg.JS.Stream(ctx, info.Stream)
			if err == nil {
				_, err = stream.GetMsg(ctx, seq)
			}
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return true, nil
			}
			return false, err
		},
		Candidate: func() bool { return s.lanes.Owns(t.Name, lane, t.Lanes) },
		Unpin: func(ctx context.Context) error {
			stream, err := s.cfg.JS.Stream(ctx, info.Stream)
			if err != nil {
				return err
			}
			return stream.UnpinConsumer(ctx, info.Name, topology.LaneGroup)
		},
		Log:  s.cfg.Log.With(slog.String(logKeyTaskType, t.Name), slog.String("lane", info.Name)),
		Loop: s.cfg.Loops.Loop(s.cfg.Names.ConsumerName(t.Name, src.Prio)),
	})
	s.laneSides.Store(side, struct{}{})
	defer s.laneSides.Delete(side)
	side.r.Run(s.stop)
}

// serving reads which workers serve each task type from the registry, for
// the lanes' plan.
func (s *Stage[T, X]) serving(ctx context.Context) (map[string][]string, error) {
	ls, err := s.cfg.Workers(ctx)
	if err != nil {
		return nil, err
	}
	serving := make(map[string][]string)
	for _, rec := range ls.Records {
		for _, sv := range rec.Types {
			serving[sv.Type] = append(serving[sv.Type], rec.ID)
		}
	}
	return serving, nil
}

// heldLanesBytes bounds the lanes' share of the worker's registry record
// (fleet.MaxRecordBytes in all): a record over it would not be written, and
// the worker would leave the registry.
const heldLanesBytes = 24 << 10

// HeldLanes lists the lanes the worker holds now, for its registry
// record: those the server pinned to it, within heldLanesBytes.
func (s *Stage[T, X]) HeldLanes() []fleet.Lane {
	var out []fleet.Lane
	s.laneSides.Range(func(k, _ any) bool {
		l := k.(*laneSide[T, X])
		st := l.r.Status()
		if !fleet.ValidPin(st.Pin) {
			return true
		}
		h := fleet.Lane{Type: l.src.Type.Name, Partition: l.src.Part, Lane: l.lane, Lanes: l.lanes, Pin: st.Pin,
			Open: st.Open, Running: st.Running, Queued: st.Queued, Awaited: st.Awaited, Keys: st.Keys}
		for _, k := range st.Busiest {
			// A task without a valid key is held under its subject.
			if ordering.ValidateKey(k.Key) == nil && len(h.Busiest) < fleet.MaxLaneKeys {
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
func (l *laneSide[T, X]) Open(cons jetstream.Consumer) (*pull.Iter, error) {
	s, t := l.s, l.src.Type
	info := cons.CachedInfo()
	it, err := pull.NewIter(s.cfg.Conn, info.Stream, info.Name, func() int { return info.Config.MaxAckPending }, func() {
		s.cfg.Counters.PullsLost.Add(1)
		s.cfg.PullLost(t.Name, streams.PriorityNormal)
	})
	if err != nil {
		return nil, err
	}
	s.watch(it, t, streams.PriorityNormal)
	return it, nil
}

// Close stops it and ends its heartbeats.
func (l *laneSide[T, X]) Close(it *pull.Iter) {
	it.Stop()
	l.s.beats.Unwatch(it)
}

// Ensure re-creates the lane's consumer.
func (l *laneSide[T, X]) Ensure(ctx context.Context) (jetstream.Consumer, error) {
	return l.src.Ensure(ctx)
}

// Pending returns the task of m, which reports its settlement to the lane.
func (l *laneSide[T, X]) Pending(m *pull.Msg) *Pending[T, X] {
	p := newPending[T, X](l.src.Type, streams.PriorityNormal, m)
	p.lane = l.r
	return p
}

// Offer queues p for a slot.
func (l *laneSide[T, X]) Offer(p *Pending[T, X]) { l.s.offer(p) }

// Withdraw takes p out of the waiting tasks; false if it got a slot.
func (l *laneSide[T, X]) Withdraw(p *Pending[T, X]) bool { return l.s.Withdraw(p) }

// HandBack naks p.
func (l *laneSide[T, X]) HandBack(p *Pending[T, X], why string) { l.s.HandBack(p, why) }

// Beat sends InProgress for p, queued behind its key.
func (l *laneSide[T, X]) Beat(p *Pending[T, X]) {
	if err := p.Msg.InProgress(); err != nil {
		l.s.cfg.AckFailed(p, "in_progress", err)
	}
}

// LaneGate returns the policy of lanes whose keys run perKey tasks at once
// (0: 1), or limit(key) when limit is set and returns more than 0: one
// task of a key at a time in strict order when neither allows more.
func LaneGate(perKey int, limit func(key string) int) lanes.Config {
	perKey = max(perKey, 1)
	if perKey == 1 && limit == nil {
		return lanes.Config{Ordered: true}
	}
	return lanes.Config{Limit: func(key string) int {
		if limit != nil {
			if n := limit(key); n > 0 {
				return n
			}
		}
		return perKey
	}}
}
