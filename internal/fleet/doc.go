// Package fleet owns the worker registry behind framework's worker
// announcements, inspect's Workers and the `jetflow workers` command:
//
//   - the record a worker writes about itself ([Record]: ID, host, process
//     ID, build, the types and priorities it serves, concurrency, slots
//     busy, start time, last heartbeat), its encoding, and its validation
//     when read back from the wire ([Rules.Decode]);
//   - the bucket holding one record per worker, whose records carry their
//     own TTL ([BucketConfig], [EnsureBucket]);
//   - the loop that writes a worker's record every interval while it runs
//     and deletes it when it stops ([Announcer]);
//   - listing the live records in one watch of the bucket ([Rules.List]);
//   - a worker's side of payload versions ([Gate]): the versions it handed
//     back ([Refusals]), its kept read of who accepts a version ([Served]),
//     the verdict on a delivered task ([Gate.Check]: run it, fail it for a
//     bad header, hand it back after a wait ([Unaccepted.Decide]), or
//     dead-letter it once the grace has passed and no live worker accepts
//     it), and storing the hand-back's schedule ([StoreHandBack]).
//
// # Why a KV bucket
//
// A reader gets the whole fleet from one watch of the bucket, at any time,
// without waiting a heartbeat interval to hear everyone (as a subscriber
// to a heartbeat subject would), and the server removes the record of a
// dead worker when its TTL passes: nobody has to notice the death and
// delete it. Each record is written with a per-message TTL
// ([Announcer] writes it every interval with a TTL of [TTLFactor]
// intervals), so a killed worker disappears within [TTLFactor] intervals
// of its last write. The bucket's MaxAge ([BucketMaxAge]) bounds what a
// record written without a TTL (by another tool) can live.
//
// A worker runs a [Service], which ensures the bucket and announces it; its
// payload-version [Gate] reads the registry ([Gate.Watch]) and a task it
// hands back is stored as a one-shot schedule ([HandBackTask]).
//
// The package knows nothing of workers or task types: the caller gives it
// the bucket name, a snapshot function and the rules for task types and
// priorities. It imports neither streams nor framework.
package fleet
