// Package streams declares jetflow's JetStream topology: the subject scheme,
// the streams, consumers and KV buckets, and [Ensure], which creates or
// updates them idempotently. The per-task-type consumers are named here
// ([Names.ConsumerName]) and created by the workers that serve them.
// Package framework builds on it; operators can use it to review or
// reproduce the configuration.
//
// # Names and subjects
//
// Every name derives from one prefix ([Config].Prefix, default
// [DefaultPrefix], "jetflow"), so several applications can share a NATS
// account. [NewNames] (or [MustNames] for constants) returns the [Names] of a
// prefix, which build every subject and resource name:
//
//	jetflow.task.<priority>.<type>   work subjects
//	jetflow.delay.<taskID>           delayed tasks as producers publish them
//	jetflow.sched.<taskID>           their one-shot schedules (written by workers)
//	jetflow.cron.<name>              repeating schedules
//	jetflow.fired.<priority>.<type>  fired schedules, sourced into the task stream
//	jetflow.dlq.<type>               dead letters
//	JETFLOW_TASKS                    task stream
//	JETFLOW_SCHEDULES                schedule stream
//	JETFLOW_DLQ                      dead-letter stream
//	JETFLOW_ADVISORIES               advisory stream
//	JETFLOW_RUNS                     workflow run documents (jetflow.wf.<runID>)
//	JETFLOW_DELAYS                   delay stream
//	<type>-<priority>                consumers (dots in the type become '_')
//
// See [Names.TaskSubject], [Names.ScheduleSubject], [Names.CronSubject],
// [Names.FiredSubject], [Names.DLQSubject], [Names.TaskStream],
// [Names.ScheduleStream], [Names.DelaySubject], [Names.DelayStream] and
// [Names.ConsumerName].
// A task type is a dotted name of tokens made of [a-z0-9_-], such as
// "payments.charge" ([ValidateTaskType]); task IDs and schedule names are
// single subject tokens ([ValidateID]). [Names.ParseTaskSubject] splits a
// work subject back into priority and type.
//
// # Priorities
//
// A [Priority] is one of [PriorityCritical], [PriorityHigh], [PriorityNormal]
// (the zero value) and [PriorityLow]; [Priorities] lists them from highest to
// lowest. It is encoded as a subject token because JetStream has no
// per-message priority: each (type, priority) pair gets its own consumer, and
// the worker decides which consumer to serve first.
//
// # Streams
//
// [Ensure] creates or updates six streams described by a [Config] (replica
// count, storage, duplicate window, retention of dead letters and
// advisories):
//
//   - the task stream (work-queue retention), holding the work subjects among
//     others: a task is deleted when it is acknowledged. It denies Nats-Rollup
//     and purges, so no publisher can delete others' tasks with a header;
//   - the schedule stream (work-queue retention, message schedules allowed),
//     holding delayed tasks and cron schedules; a schedule fires into a
//     staging subject ([Names.FiredSubject]), which the task stream sources
//     through a durable consumer with flow-control acknowledgements
//     ([Names.FiredConsumer]) and a subject transform onto the work subject;
//   - the dead-letter stream (limits retention, 30 days by default);
//   - the advisory stream, capturing the task stream's max-deliveries and
//     message-terminated advisories, which the server only publishes on core
//     NATS, once;
//   - the run stream (limits retention, one message per subject), holding
//     the state document of each workflow run ([Names.RunSubject]); a new
//     revision replaces the previous one. "jetflow upgrade
//     --migrate-run-documents" moves the documents a task stream of the
//     previous layout still holds;
//   - the delay stream (work-queue retention, rollups denied), where
//     producers publish delayed tasks ([Names.DelaySubject]); every worker's
//     delay mover stores their schedules in the schedule stream, which only
//     workers and operators write.
//
// [StreamConfigs] returns the exact configurations. Ensure is safe to call
// from many processes at once and keeps settings it does not manage (for
// example limits an operator added).
//
// # Consumers
//
// A worker creates or updates the durable pull consumer of each task type
// it serves: one per (task type, priority), named by [Names.ConsumerName],
// filtering that pair's work subject, with explicit acks. Its MaxDeliver,
// AckWait and MaxAckPending are the type's attempt limit, ack wait and
// cluster-wide in-flight cap (framework.WithMaxAttempts, WithAckWait and
// WithMaxInFlight). A pause set on the consumer is kept across updates.
//
// # Drift
//
// Some settings cannot change in place (a stream's retention or storage, or a
// task stream of the layout before the schedule stream: [MigrateTaskStream]
// recreates it).
// Ensure then reports them in [Report] and returns a *[DriftError] wrapping
// [ErrDrift]; each [Drift] says in Fix what to run, or change the [Config].
// What Ensure changes in place (the migrations of an upgrade) it lists in
// Report.Changed, with the value each setting had.
//
// [Check] compares the live topology with what Ensure creates and changes
// nothing: its [Plan] lists what is missing, what Ensure would change in
// place and what needs an operator. [DeployedConfig] reads the Config a
// deployment was ensured with from its streams, so that a check or an
// upgrade keeps the operator's settings (the jetflow CLI's "jetflow
// upgrade" and "jetflow status" use both; docs/upgrading.md).
//
// A worker refuses, with ErrDrift, a consumer whose name belongs to another
// task type: "a.b" and "a_b", for example, share a consumer name.
package streams
