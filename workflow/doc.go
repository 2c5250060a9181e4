// Package workflow runs durable multi-step workflows — chains and DAGs of
// jetflow tasks with compensation — on the same JetStream machinery as single
// tasks.
//
// # Defining a workflow
//
// A workflow is a named directed acyclic graph of steps, declared in Go:
//
//	def := workflow.New("order")
//	workflow.Step(def, "reserve", reserve, workflow.Compensate(release))
//	workflow.Step(def, "charge", charge, workflow.After("reserve"), workflow.Compensate(refund))
//	workflow.Step(def, "ship", ship, workflow.After("charge"))
//
// Each step is a function func(ctx, In) (Out, error): In is the run's input
// (decoded from JSON), Out its output (stored as JSON in the run document).
// Steps read the outputs of the steps they depend on with [Output]. Several
// steps after one run in parallel (fan-out); a step after several waits for
// all of them (fan-in). [Definition.Validate] reports invalid names,
// duplicate steps, unknown dependencies and cycles.
//
// # Sleeping
//
// [Sleep] and [SleepUntil] declare durable sleeps: steps that complete at a
// wake time, through a server-side message schedule like a delayed task
// ([framework.At]). A sleeping run holds nothing in any worker, survives
// restarts of workers and servers, and never wakes early.
//
// # Waiting for events
//
// [WaitEvent] declares a step that waits for an event named by a key, with
// an optional [Timeout]. Events are delivered with [Client.Signal],
// [Client.SignalRun] or a plain publish on "<prefix>.event.<key>"; their
// payload becomes the step's output. A waiting run holds nothing in any
// worker; an event published before the run waits for it is kept for
// [DefaultEventRetention] and found when the wait begins; an event
// resumes a run once.
//
// # Fanning out over a list
//
// [ForEach] declares a step that runs a function once per item of the list
// another step returns, each item on a task of its own, at most
// [MaxParallel] of a run at once; the steps after it read the results in
// item order with [Results] or [ItemResults]. The first item that fails for
// good fails the run (with its compensations), unless the step has
// [CollectErrors]. Items and results live beside the run document, one
// message each, so a fan-out of [MaxItems] items writes the document once;
// [Client.Status] reports its progress ([StepStatus.ItemsDone] of
// [StepStatus.Items]).
//
// # Child runs
//
// [Child] declares a step that starts a run of another workflow and waits
// for it, holding nothing in any worker. The child's ID is [ChildRunID] of
// the parent's run and step, so a retried step never starts a second
// child; its document names its parent ([Run.Parent]). The child's end
// sends the step a task: a completed child's last output becomes the
// step's output, a failed or cancelled one fails the step with
// [ErrChildFailed]. A parent that is cancelled or fails cancels its
// running children, and they cancel theirs.
//
// # Running
//
// Workers run the steps: [Register] adds one handler per step (task type
// "wf.<workflow>.<step>") and per compensation ("wfc.<workflow>.<step>") to a
// [framework.Worker], so steps get the normal retries with backoff, circuit
// breakers and dead letters. Producers start runs with [Client.Start], which
// returns the run ID, and inspect them with [Client.Status].
//
// # Durability
//
// The state of a run is one JSON document on subject "<prefix>.wf.<run>" of
// the run stream ("JETFLOW_RUNS"), which keeps one message per subject: a
// new revision replaces the previous one. Writes are guarded by the
// document's last sequence (optimistic concurrency): of two parents
// finishing at once, exactly one enqueues their common child. Starting a
// run, and finishing a step, store the document first and then the tasks of
// the steps that become ready (in the task stream); a crash in between is
// repaired when the unacknowledged task is redelivered (or, for a start,
// when the run is started again with the same ID). Task IDs are
// "<run>:<step>", so a repeated send never enqueues a step twice within the
// duplicate window. A worker that crashes mid-step leaves the task
// unacknowledged: it is redelivered, and a step whose outcome is already
// recorded is not run again.
// See docs/workflows.md for the details and the measurements behind them.
//
// When a step fails for good, the run fails and the compensations of the
// completed steps run one at a time, as tasks, in reverse completion order.
// [Client.Cancel] stops a run; [Check] lets a long step notice it.
//
// Finished runs are kept for the workflow's retention ([WithRetention],
// default 7 days) and can be read with the nats CLI:
//
//	nats stream get JETFLOW_RUNS --last-for jetflow.wf.<run>
package workflow
