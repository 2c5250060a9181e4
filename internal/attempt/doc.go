// Package attempt is the execution stage of a worker's pipeline: it runs
// one attempt of a dispatched task and carries out its settlement.
//
// # The executor
//
// An [Executor] is generic over the worker's pending task and reaches the
// worker only through the narrow [Worker] interface: the task's
// preparation, its handler call, the inputs of the settlement decision, the
// message operations ([settle.Delivery]) and the scheduling of the next
// task. It knows nothing of the public task, handlers or hooks.
//
// [Executor.Run] is the one way into execution: every task that reaches a
// handler, whichever path brought it (a slot granted by the scheduler, a
// message started from the subscription, the next message of a pull
// buffer, a parked task resuming), runs in its loop. For each task it
//
//   - waits for a due time the server fired early (never start early),
//   - runs the handler once, turning a panic into an error,
//   - parks a failed attempt an extension holds for a rerun in process:
//     its slot is lent to other tasks and a timer ([exec.Parking]), not a
//     goroutine, waits for it; or hands it back when the worker stops
//     ([Executor.StopParked] hands every parked task back at once),
//   - settles the outcome ([Executor.Settle]): the decision is
//     [settle.Decide]'s, carried out by [settle.Carry] at most once per
//     task, counted in [Counters] and reported to the worker,
//
// and then runs the task the worker gives it next in the same goroutine,
// yielding the processor first once its turn is used ([dispatch.Turn]).
package attempt
