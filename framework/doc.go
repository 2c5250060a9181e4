// Package framework runs background tasks on NATS JetStream: a [Client]
// enqueues tasks, a [Worker] pulls them and runs the handler registered for
// their type, with priorities, delays, retries with backoff and a bounded
// shutdown.
//
// The streams must exist first: call [streams.Ensure] once at start-up (it is
// idempotent) with the same prefix as the clients and workers ([WithPrefix],
// default "jetflow").
//
// Features with an API of their own are packages built on this one:
// [github.com/jetflow-io/jetflow/dlq] (dead-letter operations),
// [github.com/jetflow-io/jetflow/effects] (side effects once per task),
// [github.com/jetflow-io/jetflow/jetflowtest] (running a handler without a
// server), handlers (middleware) and workflow.
//
// # Enqueueing
//
// [NewClient] returns a client on a NATS connection; it is safe for
// concurrent use, so create one and share it. [Client.Enqueue] stores one
// task and returns a [TaskInfo] once the server has acknowledged it:
//
//	info, err := client.Enqueue(ctx, "emails.send", Email{To: "ada@example.com"},
//		framework.WithPriority(framework.PriorityLow))
//
// The payload is encoded with the client's [Codec] (JSON by default, see
// [WithCodec]); a []byte payload is sent as is. A task type is a dotted name
// of [a-z0-9_-] tokens such as "payments.charge". Each task has an ID,
// generated unless set with [WithID]; enqueueing the same ID again within
// the stream's duplicate window (2 minutes by default) stores nothing and
// reports Duplicate in the [TaskInfo], which makes retried enqueues safe.
// [Client.EnqueueMany] publishes many tasks asynchronously, keeping at most
// [WithMaxPending] unacknowledged, and reports failures per item in a
// [BatchError]. [WithHeader] adds custom headers that handlers read with
// [Task.Header].
//
// # Workers
//
// [NewWorker] returns a worker. Register a handler per task type before
// starting it: [Handle] for a typed payload, [Worker.HandleFunc] or
// [Worker.Register] for the raw [Task]. Registration panics on programmer
// errors (invalid or duplicate type, nil handler, invalid option).
//
//	framework.Handle(w, "emails.send", func(ctx context.Context, t *framework.Task, e Email) error {
//		return mailer.Send(ctx, e.To, e.Template)
//	}, framework.WithMaxAttempts(10))
//
// [Worker.Start] creates one durable pull consumer per (type, priority) the
// worker serves ([WithServedPriorities], default all four) and starts pulling;
// [Worker.Run] does the same and blocks until its context ends. Any number of
// workers, in any number of processes, may serve the same types: the
// consumers are shared and each task goes to one of them.
//
// [WithConcurrency] caps the tasks one worker runs at once (default 32),
// [WithTypeConcurrency] the tasks of one type, and [WithMaxInFlight] the tasks
// of one type and priority in flight across all workers (the consumer's
// MaxAckPending, default 1000). A worker buffers at most [WithPrefetch] tasks
// per consumer ahead of free slots. The server redelivers a task that is not
// acknowledged within the ack wait ([WithAckWait], default 30 s), so the
// worker sends heartbeats ([WithHeartbeat]) for running tasks and for fetched
// tasks waiting for a slot: tasks may run for hours.
//
// Every attempt is bounded by [WithTimeout] (default 30 minutes): its context
// is then cancelled with cause [ErrHandlerTimeout].
//
// # Priorities
//
// A task has one of four priorities, [PriorityCritical], [PriorityHigh],
// [PriorityNormal] (the default) and [PriorityLow], set with [WithPriority].
// The priority is part of the task's subject, and each (type, priority) has
// its own consumer. When a worker has a free slot and tasks of several
// priorities wait for it, the worker starts the highest priority first; with
// [WithWeights] it draws a priority with probability proportional to its
// weight (8, 4, 2, 1, for example), so that low priorities never starve. Priority does not pre-empt running
// tasks and matters only when tasks compete for slots.
//
// # Delays
//
// [In] and [At] delay a task. The task is stored as a server-side message
// schedule; when it is due the server publishes it to its work subject, and
// it runs like any other task. No process polls for due tasks, and a
// pending task survives restarts of clients, workers and (with file storage)
// servers. A worker never starts a task before its due time: one that
// arrives early is held until then (counted as HeldEarly in [Stats]). Expect tasks to start
// a few milliseconds late, up to a few hundred when many are due together.
// [Client.Cancel] removes a delayed task that has not fired yet.
//
// # Retries and failures
//
// The handler's return value decides what happens to the task; handlers
// never acknowledge by hand:
//
//   - nil: the task is done and removed from the stream.
//   - an error: the task is retried after a delay from the type's
//     [BackoffPolicy] ([WithBackoff]; default 1 s doubling up to 10 minutes,
//     with ±50 % jitter).
//   - [RetryAfter] or [RetryAfterErr]: retried after the given delay.
//   - [Permanent]: the task fails at once, without further attempts.
//
// A panic is recovered and treated as an error wrapping [ErrPanic]. A typed
// handler whose payload does not decode fails permanently with a
// [DecodeError] (it wraps [ErrDecode]): a poison task is never retried.
// Fields the handler's type has no place for are dropped by default;
// [StrictPayload] makes them a decode error, so that a payload of another
// type does not run as a zero value.
//
// A task is attempted at most [WithMaxAttempts] times (default 25). After a
// failed last attempt the worker hands the task back and the server stops
// delivering it and emits a max-deliveries advisory; a permanent failure is
// terminated. Whether such tasks are then kept as dead letters depends on
// what else is installed: see the dead-letter documentation in the
// repository's docs directory. The Finished callback of [Hooks] (with
// [ActionFail]) and the Failed counter of [Stats] report both cases.
//
// # Shutdown
//
// The library never traps signals; the program decides when to stop:
//
//	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
//	defer stop()
//	err := w.Run(ctx)
//
// When ctx ends, Run stops pulling, hands back at once the tasks fetched but
// not started, and waits up to [WithShutdownTimeout] (default 30 s) for
// running tasks. Tasks still running then have their contexts cancelled and
// are handed back for immediate redelivery to another worker; their later
// results are ignored. [Worker.Shutdown] does the same, bounded by its own
// context, for workers started with [Worker.Start].
//
// # Middleware
//
// A [Middleware] wraps a [Handler], like net/http middleware. Install it for
// all types with [WithMiddleware] or for one type with [WithTypeMiddleware];
// worker middleware runs outside type middleware and, in each list, the first
// runs outermost (see [Chain]). Middleware sees the error that decides the
// task's fate and may replace it. Package handlers has ready-made middleware
// (logging, timeouts, permanent errors by predicate); panic recovery is built
// in and needs none.
//
// # Hooks
//
// [Hooks] are optional callbacks for metrics and tracing, set with
// [WithHooks] on workers (Started, Finished, AckFailed, PullLost, Event)
// and clients (Enqueued). WithHooks may be given several times: every set
// runs, in the order given, and a package built on the worker adds its own
// with [Worker.AddHooks] without displacing yours. Each takes the context of the task or call it
// reports, so a tracer can find its span there; Finished reports the
// attempt's [Outcome]: the [Action] taken (ack, retry after a delay, fail),
// the error and how long the handler ran. They run synchronously on the
// task's goroutine: keep them fast and safe for concurrent use. A hook that
// panics is recovered and counted ([Stats].HookPanics). [Worker.Stats]
// returns the worker's counters at any time.
//
// # Options
//
// Each constructor takes its own option type: [ClientOption],
// [WorkerOption], [InspectorOption], [BucketsOption]. An
// option valid for several (for example [WithPrefix]) implements each of
// their interfaces; one passed where it does not apply does not compile.
//
// Logs go to the [*slog.Logger] set with [WithLogger] (default: discarded),
// with the attribute keys [LogKeyTaskID], [LogKeyTaskType], [LogKeyPriority],
// [LogKeyAttempt] and [LogKeyError]. Handlers get a logger carrying the task's
// attributes from [Task.Logger] or [LoggerFromContext]. Payloads are never
// logged.
//
// # Dead letters
//
// A task that fails for good — a [Permanent] error, an undecodable payload
// ([DecodeError]) or a failed last attempt — is written to the dead-letter
// stream before it is terminated, with its reason, attempts and last error in
// headers. Tasks whose worker died on the last attempt reach it through the
// server's max-deliveries advisories, routed by every worker, and a
// reconciler catches advisories that were lost. See [WithDeadLetters],
// [WithDeadLetterRouter] and [Timings].ReconcileInterval; package
// [github.com/jetflow-io/jetflow/dlq] lists, inspects, replays and purges
// the records.
//
// # Plugins and circuit breakers
//
// Features beside the core loop plug into a worker with [Worker.Use] and a
// [Plugin]: events around each attempt, a step at Start, a background
// service, and holding a failed attempt in process. Handler options of such
// a feature are [WithHandlerValue]s, read at Start with
// [Worker.HandlerValues]. A plugin publishes events of its own types with
// [Worker.Emit]; hooks receive them in their Event field. Package
// [github.com/jetflow-io/jetflow/breaker] is one: breaker.Install gives a
// worker its circuit breakers, breaker.Call runs an external call through
// a dependency's breaker, and each transition is emitted as a
// breaker.StateChange.
//
// # Cron, task state and effects
//
// Package [github.com/jetflow-io/jetflow/schedule] registers repeating
// schedules as server-side message schedules: one fire per tick however many
// processes register them, each fire with a stable task ID
// ([IdempotencyKey], [Task.ScheduleFire]). Optional task records
// ([WithStateTracking], [SetResult]) are read with an [Inspector]. Package
// [github.com/jetflow-io/jetflow/effects] records a handler's side effects
// in a KV ledger ([Worker.EffectsBucket]) so that a redelivered task skips
// them.
//
// # Operating
//
// An [Inspector] reads a task's state record ([Inspector.GetTask]) and
// cancels a delayed task ([Inspector.CancelTask]). Package
// [github.com/jetflow-io/jetflow/inspect] answers an operator's questions
// from JetStream state alone (the load of every queue, an overview of every
// queue and stream, stranded subjects, listing and finding tasks, rate
// limits, unique reservations, ordering partitions and blocked keys,
// breaker records) and pauses and resumes queues cluster-wide. Package
// [github.com/jetflow-io/jetflow/health] serves Kubernetes probes from the
// worker's liveness (its state, its start-up steps, each fetch loop's last
// poll). The jetflow command
// (cmd/jetflow) is built on them; see docs/operations.md.
package framework
