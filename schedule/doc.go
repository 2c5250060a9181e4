// Package schedule registers, lists and removes repeating ("cron")
// schedules of a jetflow topology.
//
// A schedule is a server-side message schedule: one message per schedule on
// "<prefix>.cron.<name>" in the schedule stream, with a Nats-Schedule
// header, from which the stream leader publishes a copy to the task's
// staging subject ("<prefix>.fired.<priority>.<type>") at every tick; the
// task stream sources it onto the work subject. Only the stream leader
// fires, through Raft in a cluster, so a tick enqueues one task however many
// processes registered the schedule:
//
//	s := schedule.New(client)
//	res, err := s.Register(ctx, schedule.Definition{
//		Name: "nightly-report",
//		Spec: "0 30 2 * * *", // 02:30:00 every day
//		TimeZone: "Europe/Paris",
//		Type: "reports.build",
//	})
//	// res is schedule.Created, schedule.Updated, schedule.Unchanged, or
//	// schedule.Restored when the schedule was broken (see Info.Broken).
//
// A task fired by a schedule carries the schedule's name and tick: see
// [framework.Task.ScheduleFire] and [framework.Task.IdempotencyKey]. See
// docs/cron.md for the accepted expressions, time zones and guarantees.
package schedule
