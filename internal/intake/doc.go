// Package intake is the worker's intake stage: everything between the
// worker's consumers and its executors, generic over the worker's
// registration of a task type (T) and its part of a pending task (X).
//
// # Consumers
//
//   - [Plan] lists the (partition, type, priority) consumers a worker
//     serves in a partition layout, with their specs: a type is served in
//     the partitions that serve it (streams.Layout.ServedBy), and a cap the
//     user set is split over those partitions (topology.PartitionCap).
//   - [EnsureAll] runs the ensuring of those consumers, a bounded number at
//     once; the first error cancels the others and is returned.
//   - [Stage.Ensure] ensures the consumers of the registered types in the
//     partitions served ([Stage.Discover]); [Stage.CheckPartitions] serves
//     the partitions added to the deployment while the worker runs.
//   - [PlanOrdered] lists the consumers of an ordered type ([Ordered]) in
//     each task partition, its ordered partitions' or its lanes', and
//     [Stage.EnsureOrdered] ensures them, one start-up step each, for the
//     worker to pull beside the others.
//
// # The stage
//
// A [Stage] pulls each consumer ([Stage.Pull]) with a fetcher
// (internal/fetch) or, for a lane of an ordered type, a lane's runner
// (internal/lanes), and shares the worker's slots among the tasks they
// bring (internal/dispatch). Each task is a [Pending], one allocation
// holding the stage's fields and the worker's part X. A granted task runs
// on an executor (internal/exec) in the worker's attempt loop; two direct
// paths skip the fetch loop while no task waits for a slot: a message that
// reaches an empty pull buffer with a slot free starts from the
// subscription, and an executor that finished a task takes the next
// message of its pull buffer ([Stage.Next]). The heartbeat sweeper
// (internal/heartbeat) keeps every held task and every pull buffer alive;
// the acker (internal/pull) writes the executors' acks ([Stage.Ack]).
// [Stage.Stop] and [Stage.Drain] stop it: the fetchers hand back what they
// hold, and at the shutdown deadline the running tasks are handed back.
//
// The stage answers the executor for a task's slot (Next, [Stage.LendSlot],
// Requeue, Withdraw, Reclaim, HandBack: part of attempt.Worker); a
// [Pending] task answers for its own marks (Claim, Resumed, Orphaned:
// attempt.Task). What only the worker knows comes through [Config]: its
// start-up steps, the consumers its features add in new partitions,
// failed acknowledgements and lost pulls for its hooks. It imports neither
// framework nor the worker's types.
package intake
