package framework

import (
	"context"
	"time"

	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// Repeating schedules ("cron") are managed by package schedule; a task they
// fire carries the schedule headers ([HeaderSchedule] and the next ones in
// constants.go), and its tick ([Task.ScheduleFire]) and
// idempotency key are read here. See docs/cron.md.

// ScheduleFire describes the tick of a repeating schedule that enqueued a
// task.
type ScheduleFire struct {
	// Name is the schedule's name.
	Name string
	// Time is the tick's nominal time: the cron match (or interval step)
	// that fired, in UTC. Late or duplicated deliveries of one tick carry
	// the same Time.
	Time time.Time
	// Next is the schedule's next tick, as announced by the server.
	Next time.Time
}

// ScheduleFire returns the tick of the repeating schedule that enqueued t,
// and false when t was not enqueued by a repeating schedule.
//
// The nominal time is derived from the Nats-Schedule-Next header the server
// sets: the interval before it for "@every", the previous cron match for
// cron expressions. If that fails (a schedule written by other tools), it
// falls back to the enqueue time truncated to the second.
func (t *Task) ScheduleFire() (ScheduleFire, bool) {
	f, ok := taskmsg.FireOf(t.Headers, t.EnqueuedAt)
	return ScheduleFire(f), ok
}

// IdempotencyKey returns the task's idempotency key: a string that is the
// same for every delivery of one logical task and different between tasks.
// Pass it to external APIs that deduplicate requests (payment gateways,
// e-mail providers). It is the task ID; for a task fired by a repeating
// schedule the ID is derived from the schedule's name and the tick's
// nominal time ("cron-<name>-<YYYYMMDDThhmmssZ>"), so a tick delivered twice
// has one key.
func (t *Task) IdempotencyKey() string { return t.ID }

// IdempotencyKey returns the idempotency key ([Task.IdempotencyKey]) of the
// task a handler's ctx belongs to, or "" outside a handler. For a key per
// side effect, append the effect's name: IdempotencyKey(ctx)+"/charge".
func IdempotencyKey(ctx context.Context) string {
	if t := TaskFromContext(ctx); t != nil {
		return t.IdempotencyKey()
	}
	return ""
}
