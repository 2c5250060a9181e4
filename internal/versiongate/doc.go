// Package versiongate carries out a worker's payload-version verdicts on
// its delivered tasks. The verdict itself is internal/fleet's
// ([fleet.Gate.Check], a function of the task's headers, the versions its
// handler accepts and the registry); this package does what it says, on
// the worker's pending task ([intake.Pending]):
//
//   - run: the task goes on to its handler;
//   - a version header that is not a version, or a version no live worker
//     accepted within the grace: the task fails for good, through the
//     worker's settlement;
//   - any other version the handler does not accept: the task is handed
//     back without spending an attempt, stored as a one-shot schedule that
//     fires it into its queue again ([fleet.HandBackTask]), and its
//     delivery acknowledged. A task that cannot fire from a schedule (an
//     ordered one, a cron tick) or whose schedule cannot be stored is
//     redelivered instead, with a delay, which spends a delivery.
//
// Each hand-back and redelivery is counted ([Gate].Back,
// [Gate].Redelivered) and logged on the task's logger.
//
// The worker reaches its tasks through function values set once
// ([Gate].Accepted, Task, Fail, AckFailed), so that the package imports
// neither framework nor its types, and checking a task allocates nothing
// beyond what the verdict needs.
package versiongate
