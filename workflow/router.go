package workflow

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/retry"
	"github.com/jetflow-io/jetflow/streams"
)

// eventsPlugin names the plugin [Register] installs on a worker that runs
// workflows with [WaitEvent] steps.
const eventsPlugin = "workflow-events"

// router turns events into the tasks of the steps waiting for them. Every
// worker with WaitEvent steps runs one, on the event stream's shared
// durable consumer ([streams.Names.EventConsumer]), so each event is routed
// by one worker. It needs no definition: a wait entry names the step's
// workflow, step and priority.
type router struct {
	store *store
	names streams.Names
	log   *slog.Logger

	routed    atomic.Uint64 // events that resumed at least one run
	unmatched atomic.Uint64 // events no run waited for (kept for the retention)
	refused   atomic.Uint64 // events with an invalid key or payload
}

// RouterStats counts what the event router of one worker did since it
// started.
type RouterStats struct {
	// Routed counts events for which at least one waiting run was sent
	// its step's task.
	Routed uint64
	// Unmatched counts events no run waited for when they came. They stay
	// in the event stream for its retention, where a run that starts
	// waiting for their key later finds them.
	Unmatched uint64
	// Refused counts events whose key or payload is invalid (not JSON,
	// too large): they resume no run.
	Refused uint64
}

// EventRouterStats returns the counters of the event router [Register]
// installed on w, and false when w runs no workflow with [WaitEvent]
// steps. It is safe for concurrent use.
func EventRouterStats(w *framework.Worker) (RouterStats, bool) {
	v, ok := w.Plugin(eventsPlugin)
	rt, _ := v.(*router)
	if !ok || rt == nil {
		return RouterStats{}, false
	}
	return RouterStats{Routed: rt.routed.Load(), Unmatched: rt.unmatched.Load(), Refused: rt.refused.Load()}, true
}

// installRouter installs the event router on w once: its Prepare creates
// the event and wait streams where they are missing (with the replicas and
// storage of the deployment's task stream), its Service routes events.
func installRouter(w *framework.Worker, s *store) {
	if _, ok := w.Plugin(eventsPlugin); ok {
		return
	}
	rt := &router{store: s, names: w.Names(), log: w.Logger()}
	w.Use(framework.Plugin{
		Name:  eventsPlugin,
		Value: rt,
		Prepare: func(ctx context.Context, w *framework.Worker) error {
			cfg, found, err := streams.DeployedConfig(ctx, w.JetStream(), w.Names().Prefix())
			if err != nil {
				return fmt.Errorf("workflow: event streams: %w", err)
			}
			if !found {
				return fmt.Errorf("workflow: event streams: %w: no task stream %s", framework.ErrTopologyMissing, w.Names().TaskStream())
			}
			return streams.EnsureEvents(ctx, w.JetStream(), cfg)
		},
		Service: func(ctx context.Context, _ *framework.Worker) { rt.run(ctx) },
	})
}

// routerBackoff spaces the router's attempts to reach its consumer.
var routerBackoff = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// run routes events until ctx ends.
func (rt *router) run(ctx context.Context) {
	b := routerBackoff.New()
	for ctx.Err() == nil {
		err := rt.consume(ctx)
		if ctx.Err() != nil {
			return
		}
		d := b.NextBackOff()
		rt.log.Warn("jetflow workflow event router stopped; starting again", slog.Duration("after", d), slog.Any(framework.LogKeyError, err))
		if !retry.Sleep(ctx, d) {
			return
		}
	}
}

// consume reads the event consumer until ctx ends or the iterator fails.
func (rt *router) consume(ctx context.Context) error {
	c, err := rt.store.js.Consumer(ctx, rt.names.EventStream(), rt.names.EventConsumer())
	if err != nil {
		return err
	}
	it, err := c.Messages(jetstream.PullMaxMessages(64))
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		msg, err := it.Next()
		if err != nil {
			return err
		}
		rt.route(ctx, msg)
	}
}

// route sends the task of every step waiting for msg's key, then
// acknowledges msg. When the tasks cannot be sent, msg comes back.
func (rt *router) route(ctx context.Context, msg jetstream.Msg) {
	sctx, cancel := stateContext(ctx)
	defer cancel()
	key, err := rt.names.ParseEventSubject(msg.Subject())
	if err == nil {
		_, err = eventPayload(msg.Data())
	}
	if err != nil {
		rt.refused.Add(1)
		rt.log.Warn("jetflow workflow event refused: it resumes no run", slog.String("subject", cutSubject(msg.Subject())), slog.Any(framework.LogKeyError, err))
		rt.ack(msg)
		return
	}
	ws, err := rt.store.waiters(sctx, key)
	if err != nil {
		rt.log.Warn("jetflow workflow could not read the runs waiting for an event; it comes back", slog.String("event_key", key), slog.Any(framework.LogKeyError, err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	if len(ws) == 0 {
		rt.unmatched.Add(1)
		rt.log.Info("jetflow workflow event for no waiting run: kept for the event stream's retention", slog.String("event_key", key))
		rt.ack(msg)
		return
	}
	tasks := make([]*nats.Msg, 0, len(ws))
	for _, w := range ws {
		p, _ := streams.ParsePriority(w.entry.Priority) // checked by waiters
		tasks = append(tasks, taskMsg(rt.names, p, StepTaskType(w.entry.Workflow, w.entry.Step), w.run, eventTaskID(w.run, w.entry.Step)))
	}
	if err := rt.store.publishTasks(sctx, tasks); err != nil {
		rt.log.Warn("jetflow workflow could not send the tasks of the runs waiting for an event; it comes back", slog.String("event_key", key), slog.Any(framework.LogKeyError, err))
		_ = msg.NakWithDelay(time.Second)
		return
	}
	rt.routed.Add(1)
	rt.ack(msg)
}

func (rt *router) ack(msg jetstream.Msg) {
	if err := msg.Ack(); err != nil {
		// Redelivered: routing again sends tasks that are duplicates, or
		// that find their steps done.
		rt.log.Debug("jetflow workflow could not acknowledge an event", slog.Any(framework.LogKeyError, err))
	}
}

// cutSubject bounds a subject from the wire for a log line.
func cutSubject(s string) string {
	if len(s) > 256 {
		return s[:256] + "…"
	}
	return s
}
