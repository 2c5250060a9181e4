package versiongate

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/fleet"
	"github.com/jetflow-io/jetflow/internal/intake"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
	"github.com/jetflow-io/jetflow/streams"
)

// logKeyError is the key of an error in the worker's log lines
// (framework.LogKeyError; the package cannot import framework).
const logKeyError = "error"

// Task is what a hand-back reads of a delivered task beyond its message:
// the worker's reading of it.
type Task struct {
	// ID is the task's ID, which names its schedule.
	ID string
	// Sequence is the delivered message's stream sequence, which
	// deduplicates the schedule.
	Sequence uint64
	// EnqueuedAt is when the task was enqueued.
	EnqueuedAt time.Time
	// Ordered is true for a task of an ordered type or key: it stays in
	// its key's queue and cannot fire from a schedule.
	Ordered bool
	// Log is the task's logger.
	Log *slog.Logger
}

// Gate is a worker's payload-version gate: the verdicts (the embedded
// [fleet.Gate], whose Refused the worker's registry record lists) and
// their carrying-out on the worker's pending tasks, whose parts are T and
// X ([intake.Pending]). Set every field (and the fleet.Gate's) before the
// worker starts; [Gate.Refuse] is then safe for concurrent use.
type Gate[T, X any] struct {
	fleet.Gate

	// Ctx bounds the storing of hand-backs (the worker's hard context);
	// JS stores them in the schedule stream of Names.
	Ctx   context.Context
	JS    jetstream.JetStream
	Names streams.Names
	// ErrCorrupt and ErrNoWorker are the sentinels wrapped in the error a
	// task fails with: a version header that is not a version, or a
	// version no live worker accepted within the grace.
	ErrCorrupt, ErrNoWorker error

	// Accepted returns the versions p's handler accepts, sorted, or nil
	// when its type declares none: every version runs.
	Accepted func(p *intake.Pending[T, X]) []int
	// Task returns what a hand-back reads of p's task. It is called only
	// for a task that is handed back.
	Task func(p *intake.Pending[T, X]) Task
	// Fail settles p as failed for good with err, without a retry.
	Fail func(p *intake.Pending[T, X], err error)
	// AckFailed reports an Ack or Nak of p ("ack", "nak") that could not
	// be sent.
	AckFailed func(p *intake.Pending[T, X], op string, err error)

	// Back counts the tasks handed back, Redelivered those redelivered
	// instead (spending a delivery) because their schedule could not be
	// stored.
	Back, Redelivered atomic.Uint64
}

// Refuse hands p back when its type declares the versions it accepts and
// p's is not among them, or fails it when its version header is invalid or
// no live worker accepted its version within the grace ([fleet.Gate.Check]).
// It returns true when p was settled or handed back, false when p runs.
func (g *Gate[T, X]) Refuse(p *intake.Pending[T, X]) bool {
	accepted := g.Accepted(p)
	if accepted == nil {
		return false
	}
	h := p.Msg.Headers()
	now := time.Now()
	verdict, d, err := g.Check(accepted, p.Type.Name, h, now)
	switch verdict {
	case fleet.Run:
		return false
	case fleet.Corrupt:
		g.Fail(p, fmt.Errorf("%w: %w", g.ErrCorrupt, err))
		return true
	case fleet.NoWorker:
		g.Fail(p, fmt.Errorf("%w: %w", g.ErrNoWorker, err))
		return true
	}
	if !p.Claim() {
		return true
	}
	t := g.Task(p)
	v, _ := fleet.ParseVersion(h.Get(fleet.HeaderPayloadVersion)) // for the logs
	if err = g.handBack(p, &t, d, now.Add(d.Delay)); err != nil {
		// Without the schedule, a redelivery (which spends a delivery).
		g.Redelivered.Add(1)
		t.Log.Warn("jetflow could not hand back a task of a payload version its handler does not accept; redelivering it, which spends an attempt",
			slog.Int("version", v), slog.Any(logKeyError, err))
		p.LaneSettled(true)
		if nerr := p.Msg.NakWithDelay(d.Delay); nerr != nil {
			g.AckFailed(p, "nak", nerr)
		}
		return true
	}
	p.LaneSettled(false)
	g.Back.Add(1)
	t.Log.Debug("jetflow task handed back: payload version not accepted", slog.Int("version", v), slog.Duration("retry_in", d.Delay))
	if aerr := p.Msg.Ack(); aerr != nil {
		// Redelivered: its schedule is pending or fired already (handBack
		// finds it).
		g.AckFailed(p, "ack", aerr)
	}
	return true
}

// handBack stores p's task t as a one-shot schedule due at due that fires
// it into its queue again, with the hand-back headers of d
// (fleet.HandBackTask). The schedule is deduplicated by the delivered
// message's sequence, so a redelivery of the same message stores it once.
// A task that cannot fire from a schedule (an ordered task, a cron tick)
// gets an error: it is redelivered instead.
func (g *Gate[T, X]) handBack(p *intake.Pending[T, X], t *Task, d fleet.HandBack, due time.Time) error {
	return fleet.HandBackTask(g.Ctx, g.JS, g.Names.ScheduleStream(), t.Ordered, &taskmsg.HandBack{
		Subject: g.Names.ScheduleSubject(t.ID), Target: g.Names.FiredSubject(p.Prio, p.Type.Name),
		ID: t.ID, Sequence: t.Sequence, Due: due, Header: p.Msg.Headers(), Data: p.Msg.Data(),
		EnqueuedAt: t.EnqueuedAt, Since: d.Since, Refusals: d.Next()})
}
