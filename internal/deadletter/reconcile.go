package deadletter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/internal/streamdefs"
	"github.com/nats-io/nats.go/jetstream"
)

// The reconciler: the tasks that reached their max deliveries and that no
// advisory routed (router.go).

// RunReconciler runs a reconciliation pass every interval (with ±10 %
// jitter, so that workers do not all ask at once) until ctx ends.
func (c *Core) RunReconciler(ctx context.Context, every time.Duration) {
	r := &reconciler{c: c}
	next := func() time.Duration {
		return every - every/10 + rand.N(every/5+1)
	}
	// The first pass comes early: it only collects candidates.
	if !retry.Sleep(ctx, rand.N(min(every, time.Second)+1)) {
		return
	}
	for {
		n, err := r.pass(ctx)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			c.log.Warn("jetflow dead-letter reconciler pass failed", slog.Any(logKeyError, err))
		} else if n > 0 {
			c.log.Warn("jetflow dead-letter reconciler routed tasks whose advisory was lost", slog.Int("tasks", n))
		}
		if !retry.Sleep(ctx, next()) {
			return
		}
	}
}

// reconcileCap bounds the candidates one pass keeps per consumer; the rest
// are found by later passes.
const reconcileCap = 10000

// reconciler finds tasks that reached their max deliveries but were never
// routed, because the advisory was lost (no advisory stream at the time, a
// cluster losing it during a leader change) or dropped.
//
// The server keeps such a task in the task stream and delivers it no more.
// For the consumer of its work subject it is neither pending (in flight or
// waiting for a redelivery) nor undelivered; an acknowledged or terminated
// task is gone from the stream (work-queue retention). So a task that is
// still stored and that the consumer has delivered and no longer awaits an
// ack for is max-delivered. The consumer's info gives two safe bounds for
// "delivered and no longer awaited":
//
//   - every sequence up to the ack floor (the floor only passes resolved
//     tasks; measured on nats-server 2.15: a max-delivered task does not move
//     the floor itself, the next acknowledgement moves it past);
//   - when the consumer has no pending acks at all, every sequence up to the
//     last delivered one.
//
// In-flight tasks are pending and waiting tasks are beyond the delivered
// sequence, so neither is ever a candidate. One race remains: the server
// moves the ack floor a moment before it deletes an acknowledged task. A
// candidate is therefore routed only when a later pass, at least a grace
// period after, still finds it stored under the same consumer (same creation
// time): an acknowledged task is deleted within milliseconds, a
// max-delivered one stays.
type reconciler struct {
	c    *Core
	prev map[string]reconcileCands // by consumer name
}

type reconcileCands struct {
	created time.Time
	seqs    map[uint64]struct{}
	max     uint64
}

// pass looks at every task consumer once, routes the candidates of the
// previous pass that are confirmed and remembers the new ones. It returns
// the number of tasks routed.
func (r *reconciler) pass(ctx context.Context) (int, error) {
	c := r.c
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	ts, err := c.Stream(ctx, c.topo.TaskStream)
	if err != nil {
		return 0, err
	}
	counts := make(map[string]uint64)
	for _, wildcard := range []string{c.topo.TaskWildcard, c.topo.OrderedWildcard} {
		if wildcard == "" {
			continue
		}
		info, err := ts.Info(ctx, jetstream.WithSubjectFilter(wildcard))
		if err != nil {
			return 0, fmt.Errorf("framework: reconcile: task stream info: %w", err)
		}
		maps.Copy(counts, info.State.Subjects)
	}
	var infos []*jetstream.ConsumerInfo
	lister := ts.ListConsumers(ctx)
	for ci := range lister.Info() {
		infos = append(infos, ci)
	}
	if err := lister.Err(); err != nil {
		return 0, fmt.Errorf("framework: reconcile: list consumers: %w", err)
	}
	next := make(map[string]reconcileCands)
	routed := 0
	var errs []error
	for _, ci := range infos {
		filters := c.taskFilters(ci.Config)
		if filters == nil {
			continue // not a task consumer, or one whose tasks never die
		}
		prev := r.prev[ci.Name]
		if !prev.created.Equal(ci.Created) {
			prev = reconcileCands{}
		}
		// Stored tasks that are neither undelivered nor pending: leftovers
		// (up to races between the two snapshots).
		extra := -int64(ci.NumPending) - int64(ci.NumAckPending)
		stored := make([]uint64, len(filters))
		for i, f := range filters {
			stored[i] = storedUnder(counts, f)
			extra += int64(stored[i])
		}
		if extra <= 0 && len(prev.seqs) == 0 {
			continue
		}
		bound := deadBound(ci)
		cur := reconcileCands{created: ci.Created, seqs: make(map[uint64]struct{})}
		var err error
		for i, filter := range filters {
			if stored[i] == 0 {
				continue // nothing stored: no candidate, and no previous one left
			}
			err = jsapi.Scan(ctx, c.nc, c.topo.TaskStream, filter, 1, max(bound, prev.max), time.Time{}, 256,
				func(m jsapi.Stored) (bool, error) {
					if _, ok := prev.seqs[m.Seq]; ok {
						if err := c.routeStored(ctx, m, ci.Config.MaxDeliver, routedByReconciler); err != nil {
							errs = append(errs, err)
							cur.add(m.Seq) // try again next pass
						} else {
							routed++
						}
						return true, nil
					}
					if m.Seq <= bound && len(cur.seqs) < reconcileCap {
						cur.add(m.Seq)
					}
					return true, nil
				})
			if err != nil {
				break
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("framework: reconcile %s: %w", ci.Name, err))
			cur = prev // keep what we knew
		}
		if len(cur.seqs) > 0 {
			next[ci.Name] = cur
		}
	}
	r.prev = next
	return routed, errors.Join(errs...)
}

// taskFilters returns the subjects a task consumer of config reads: its
// work subject, or the slot subjects of an ordered task type's partition
// consumer. It returns nil for any other consumer, and for one that never
// gives up on a task (MaxDeliver below 1: no task of it dies).
func (c *Core) taskFilters(config jetstream.ConsumerConfig) []string {
	if _, _, _, ok := c.topo.Work(config.FilterSubject); ok {
		return []string{config.FilterSubject}
	}
	if config.FilterSubject != "" || len(config.FilterSubjects) == 0 || config.MaxDeliver < 1 || c.topo.ReadsSlot == nil {
		return nil
	}
	for _, f := range config.FilterSubjects {
		if !c.topo.ReadsSlot(f, config.Durable) {
			return nil
		}
	}
	return config.FilterSubjects
}

// storedUnder returns the tasks stored under filter, a subject or a
// wildcard (an ordered type's bits filter), from the stream's count per
// subject.
func storedUnder(counts map[string]uint64, filter string) uint64 {
	if !strings.ContainsAny(filter, "*>") {
		return counts[filter]
	}
	var n uint64
	for subject, c := range counts {
		if streamdefs.SubjectMatches(filter, subject) {
			n += c
		}
	}
	return n
}

func (cs *reconcileCands) add(seq uint64) {
	cs.seqs[seq] = struct{}{}
	cs.max = max(cs.max, seq)
}

// ReconcileGrace is the time between the two passes of [Core.Reconcile].
const ReconcileGrace = 2 * time.Second

// Reconcile runs one reconciliation now: it looks twice, grace apart, and
// routes only what both looks found, so that a task acknowledged at the
// moment of the first look is never taken for a dead one. It returns the
// number of tasks routed.
func (c *Core) Reconcile(ctx context.Context, grace time.Duration) (int, error) {
	r := &reconciler{c: c}
	if _, err := r.pass(ctx); err != nil {
		return 0, err
	}
	if len(r.prev) == 0 {
		return 0, nil
	}
	if !retry.Sleep(ctx, grace) {
		return 0, ctx.Err()
	}
	return r.pass(ctx)
}

// routers is the number of advisories a router handles at once.
const routers = 32
