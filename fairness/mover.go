package fairness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/deadletter"
	"github.com/jetflow-io/jetflow/internal/delays"
	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// How often a mover looks without being woken: fallbackTick bounds the
// wait of a type whose tasks other workers finished (a worker is woken by
// its own), sweepEvery the life of a staged message on a subject that no
// type's round reads (it is dead-lettered).
const (
	fallbackTick = 100 * time.Millisecond
	sweepEvery   = 5 * time.Second
)

// fairType is the state of one task type with fair shares on a worker.
type fairType struct {
	name string
	o    Options
	// cons holds the type's consumers by priority rank, looked up on
	// first use (nil: not found yet).
	cons  [len(streams.Priorities)]jetstream.Consumer
	turns [len(streams.Priorities)]turns
	// finished counts the type's tasks this worker finished since the last
	// look; deep says that look found the task stream deep enough.
	finished atomic.Int64
	deep     atomic.Bool
	// done counts every task of the type this worker finished; meter
	// smooths its rate (used by fill only) and depth is the depth fill
	// last targeted (targetDepth).
	done  atomic.Int64
	meter rateMeter
	depth atomic.Int64
}

// half returns half the depth the mover last targeted, at least 1: the
// finished tasks that make a deep type worth a look.
func (ft *fairType) half() int64 {
	return max(ft.depth.Load()/2, 1)
}

// weight returns the weight of the key of a fair subject.
func (ft *fairType) weight(names streams.Names) func(subject string) int {
	if len(ft.o.Weights) == 0 {
		return func(string) int { return 1 }
	}
	return func(subject string) int {
		_, _, key, err := names.ParseFairSubject(subject)
		if err != nil {
			return 1
		}
		if w := ft.o.Weights[key]; w > 0 {
			return w
		}
		return 1
	}
}

// mover moves the staged tasks of a worker's fair types to their work
// subjects, in turns over their keys. Several workers' movers may move the
// same task at once: the task ID as deduplication ID stores it once, and
// each mover deletes only what it moved, by sequence.
type mover struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	names  streams.Names
	log    *slog.Logger
	core   *deadletter.Core // nil: dead letters are off
	stream jetstream.Stream
	types  map[string]*fairType
	wake   chan struct{}
}

// poke wakes the mover, without waiting.
func (m *mover) poke() {
	select {
	case m.wake <- struct{}{}:
	default:
	}
}

// finished notes a finished task of taskType, and wakes the mover when
// half the type's depth drained since it found it deep.
func (m *mover) finished(taskType string) {
	ft := m.types[taskType]
	if ft == nil {
		return
	}
	ft.done.Add(1)
	if n := ft.finished.Add(1); ft.deep.Load() && n >= ft.half() {
		m.poke()
	}
}

// run moves until ctx ends. It is woken by staged tasks (a core
// subscription on the types' fair subjects), by the worker's finished
// tasks, and by a fallback tick.
func (m *mover) run(ctx context.Context) {
	for _, ft := range m.types {
		sub, err := m.nc.Subscribe(m.names.Prefix()+".fair."+ft.name+".>", func(*nats.Msg) {
			if !ft.deep.Load() {
				m.poke()
			}
		})
		if err != nil {
			m.log.Warn("jetflow fairness: cannot watch staged tasks, moving on the fallback tick", slog.String("task_type", ft.name), slog.Any("error", err))
			continue
		}
		defer func() { _ = sub.Unsubscribe() }()
	}
	tick := time.NewTicker(fallbackTick)
	defer tick.Stop()
	nextSweep := time.Now()
	for {
		ticked := false
		select {
		case <-ctx.Done():
			return
		case <-m.wake:
		case <-tick.C:
			ticked = true
		}
		for _, ft := range m.types {
			if !ticked && ft.deep.Load() && ft.finished.Load() < ft.half() {
				continue
			}
			if err := m.fill(ctx, ft); err != nil && ctx.Err() == nil {
				m.log.Warn("jetflow fairness: move", slog.String("task_type", ft.name), slog.Any("error", err))
			}
		}
		if ticked && time.Now().After(nextSweep) {
			nextSweep = time.Now().Add(sweepEvery)
			if err := m.sweep(ctx); err != nil && ctx.Err() == nil {
				m.log.Warn("jetflow fairness: sweep", slog.Any("error", err))
			}
		}
	}
}

// fill moves staged tasks of ft while fewer than half its depth wait in
// the task stream: critical first, each priority's keys in turns. The
// depth is what this worker finishes in ft.o.Wait at its recent rate
// (targetDepth), so that short tasks get deep refills and slow ones
// shallow refills.
func (m *mover) fill(ctx context.Context, ft *fairType) error {
	ft.finished.Store(0)
	rate := ft.meter.observe(time.Now(), ft.done.Load())
	depth := uint64(targetDepth(ft.o.Depth, rate, ft.o.Wait))
	ft.depth.Store(int64(depth))
	pending, err := m.pending(ctx, ft)
	if err != nil {
		return err
	}
	if pending > depth/2 {
		m.setDeep(ft, true)
		return nil
	}
	budget := int(depth - pending)
	// One listing of the keys with staged tasks, for every priority.
	info, err := m.stream.Info(ctx, jetstream.WithSubjectFilter(m.names.Prefix()+".fair."+ft.name+".*.*"))
	if err != nil {
		return err
	}
	var byPriority [len(streams.Priorities)]map[string]uint64
	for subject, n := range info.State.Subjects {
		p, taskType, _, err := m.names.ParseFairSubject(subject)
		if err != nil || taskType != ft.name {
			continue // an invalid key is dead-lettered by the sweep
		}
		r := p.Rank()
		if byPriority[r] == nil {
			byPriority[r] = map[string]uint64{}
		}
		byPriority[r][subject] = n
	}
	for i, p := range streams.Priorities {
		if budget <= 0 {
			break
		}
		if ft.cons[i] == nil || len(byPriority[i]) == 0 {
			continue // no worker serves it yet: it waits staged
		}
		plan := ft.turns[i].plan(byPriority[i], budget, ft.weight(m.names))
		n, err := m.move(ctx, ft.name, p, plan)
		budget -= n
		if err != nil {
			return err
		}
	}
	m.setDeep(ft, budget <= 0)
	return nil
}

// setDeep notes whether ft was found deep. Tasks that finished while the
// look went on did not wake the mover (ft was not deep then): when enough
// did, it wakes now. finished and setDeep each write before they read, so
// one of them sees the other's write and no wake-up is lost.
func (m *mover) setDeep(ft *fairType, deep bool) {
	ft.deep.Store(deep)
	if deep && ft.finished.Load() >= ft.half() {
		m.poke()
	}
}

// pending returns how many tasks of ft wait in the task stream, not yet
// delivered to any worker, over the priorities with a consumer: one
// consumer info request per priority, at once.
func (m *mover) pending(ctx context.Context, ft *fairType) (uint64, error) {
	var (
		wg      sync.WaitGroup
		counts  [len(streams.Priorities)]uint64
		errs    [len(streams.Priorities)]error
		pending uint64
	)
	for i, p := range streams.Priorities {
		wg.Go(func() {
			c := ft.cons[i]
			if c == nil {
				var err error
				c, err = m.js.Consumer(ctx, m.names.TaskStream(), m.names.ConsumerName(ft.name, p))
				if errors.Is(err, jetstream.ErrConsumerNotFound) {
					return
				}
				if err != nil {
					errs[i] = err
					return
				}
				ft.cons[i] = c
				counts[i] = c.CachedInfo().NumPending
				return
			}
			info, err := c.Info(ctx)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				ft.cons[i] = nil
				return
			}
			if err != nil {
				errs[i] = err
				return
			}
			counts[i] = info.NumPending
		})
	}
	wg.Wait()
	for i := range counts {
		if errs[i] != nil {
			return 0, errs[i]
		}
		pending += counts[i]
	}
	return pending, nil
}

// moving is one key's turn under way: the sequences read, and for each the
// acknowledgement of its publish (nil: dead-lettered).
type moving struct {
	subject string
	seqs    []uint64
	acks    []jetstream.PubAckFuture
}

// move carries out plan for taskType at priority p: it reads each key's
// first staged tasks, publishes them to the work subject (asynchronously,
// in order), dead-letters those that cannot be tasks, then deletes from
// each key what was stored, up to the first failure. It returns how many
// tasks it moved or dead-lettered.
func (m *mover) move(ctx context.Context, taskType string, p streams.Priority, plan []take) (int, error) {
	target := m.names.TaskSubject(p, taskType)
	var turns []moving
	var firstErr error
	for _, t := range plan {
		tu := moving{subject: t.subject}
		_, key, keyErr := m.keyOf(t.subject)
		_, err := jsapi.DirectGet(ctx, m.nc, m.names.FairStream(), jsapi.GetRequest{Seq: 1, NextFor: t.subject, Batch: t.n},
			func(s jsapi.Stored) error {
				if len(tu.seqs) >= t.n {
					return nil
				}
				msg, id, err := (*nats.Msg)(nil), "", keyErr
				if err == nil {
					msg, id, err = taskMsg(target, key, s.Header, s.Data)
				}
				if err != nil {
					if err := m.reject(ctx, s, id, taskType, p, err); err != nil {
						return err // stop this key here
					}
					tu.seqs, tu.acks = append(tu.seqs, s.Seq), append(tu.acks, nil)
					return nil
				}
				ack, err := m.js.PublishMsgAsync(msg, jetstream.WithExpectStream(m.names.TaskStream()))
				if err != nil {
					return err
				}
				tu.seqs, tu.acks = append(tu.seqs, s.Seq), append(tu.acks, ack)
				return nil
			})
		if err != nil && firstErr == nil {
			firstErr = err
		}
		turns = append(turns, tu)
		if err != nil {
			break
		}
	}
	moved := 0
	for _, tu := range turns {
		var last uint64
		for i, a := range tu.acks {
			if a != nil {
				if err := waitAck(ctx, a); err != nil {
					if firstErr == nil {
						firstErr = fmt.Errorf("fairness: move %s: %w", tu.subject, err)
					}
					break
				}
			}
			last = tu.seqs[i]
			moved++
		}
		if last == 0 {
			continue
		}
		if err := m.stream.Purge(ctx, jetstream.WithPurgeSubject(tu.subject), jetstream.WithPurgeSequence(last+1)); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("fairness: delete the moved tasks of %s: %w", tu.subject, err)
		}
	}
	return moved, firstErr
}

// keyOf parses a fair subject and validates its key.
func (m *mover) keyOf(subject string) (string, string, error) {
	_, taskType, key, err := m.names.ParseFairSubject(subject)
	if err == nil {
		err = taskmsg.ValidateKey(key)
	}
	if err != nil {
		return "", "", fmt.Errorf("%w: staged on %q: %w", framework.ErrCorruptTask, subject, err)
	}
	return taskType, key, nil
}

// waitAck waits for the acknowledgement of an asynchronous publish.
func waitAck(ctx context.Context, a jetstream.PubAckFuture) error {
	select {
	case <-a.Ok():
		return nil
	case err := <-a.Err():
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// reject writes the dead-letter record of a staged message that cannot
// become a task (reason "invalid", with cause). Without dead letters it
// is only logged: either way the caller deletes it.
func (m *mover) reject(ctx context.Context, s jsapi.Stored, id, taskType string, p streams.Priority, cause error) error {
	m.log.Warn("jetflow fairness: staged message dead-lettered", slog.String("subject", s.Subject),
		slog.Uint64("seq", s.Seq), slog.Any("error", cause))
	if m.core == nil {
		return nil
	}
	if id == "" {
		id = "fair-" + strconv.FormatUint(s.Seq, 10)
	}
	if taskType == "" {
		taskType = delays.RejectedType
	}
	return m.core.WriteRejected(ctx, m.names.FairStream(), deadletter.Attempt{Seq: s.Seq, Subject: s.Subject,
		Header: withoutNats(s.Header), Payload: s.Data, ID: id, Type: taskType, Priority: p.String(), Cause: cause})
}

// sweep dead-letters the staged messages on subjects no round reads: not
// a fair subject, or one whose key is invalid. Subjects of types this
// worker does not serve are left to their workers.
func (m *mover) sweep(ctx context.Context) error {
	info, err := m.stream.Info(ctx, jetstream.WithSubjectFilter(m.names.FairWildcard()))
	if err != nil {
		return err
	}
	for subject := range info.State.Subjects {
		p, taskType, key, err := m.names.ParseFairSubject(subject)
		if err == nil {
			if m.types[taskType] == nil {
				continue
			}
			if err = taskmsg.ValidateKey(key); err == nil {
				continue
			}
		} else {
			taskType = ""
		}
		cause := fmt.Errorf("%w: staged on %q: %w", framework.ErrCorruptTask, subject, err)
		var last uint64
		_, err = jsapi.DirectGet(ctx, m.nc, m.names.FairStream(), jsapi.GetRequest{Seq: 1, NextFor: subject, Batch: 100},
			func(s jsapi.Stored) error {
				if err := m.reject(ctx, s, "", taskType, p, cause); err != nil {
					return err
				}
				last = s.Seq
				return nil
			})
		if last > 0 {
			if perr := m.stream.Purge(ctx, jetstream.WithPurgeSubject(subject), jetstream.WithPurgeSequence(last+1)); perr != nil && err == nil {
				err = perr
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}
