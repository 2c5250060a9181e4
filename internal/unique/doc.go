// Package unique owns the reservations behind framework's unique tasks
// (Unique, UniqueKey, UniqueUntilDone, inspect.Operator.UniqueReservations):
//
//   - the unique headers a client sets and their meaning ([HeaderKey],
//     [HeaderUntil], [HeaderRevision]), the uniqueness key (the SHA-256 of
//     the task type with the caller's key or the payload, [Spec.Headers]) and
//     its validation when read back from the wire ([Validators.ParseKey]);
//   - the unique bucket, whose keys carry their own TTL ([EnsureBucket],
//     [Cache]);
//   - taking a reservation before the publish ([Validators.Reserve], and
//     [Validators.ReserveTask] from a task's headers), giving it back after
//     a failed publish ([Reserved.Release]) or a successful UniqueUntilDone
//     task ([Cache.ReleaseDone], [Validators.ReleaseTarget]), and listing
//     reservations ([Validators.List]).
//
// Bucket and stream names and the rules for task types and IDs come from the
// caller; the package imports neither streams nor framework.
package unique
