// Package jsapi owns jetflow's JetStream plumbing below the jetstream
// package: requests that package does not offer, or offers at a higher
// cost.
//
//   - [DirectGet] and [Scan] read streams with the direct get API, which any
//     replica answers without creating server-side state: one request
//     returns up to a batch of messages matching a subject filter, or the
//     last message of each subject matching a filter. That keeps a page of
//     dead letters, one batch of a replay, the failure history of a task or
//     a schedule lookup to a single round trip, with bounded memory.
//   - [PurgeSubject] purges one subject and reports how many messages it
//     removed (cancelling a delayed task, removing a schedule).
//   - [EnsureBucket] and [TaskStreamBucket] create KV buckets that live like
//     the task stream (same storage and replicas); a [BucketCache] looks
//     one up, or has it created, on first use.
//   - [Publish] stores a message in a stream, retrying with the same
//     message (and so the same deduplication ID) while the stream cannot
//     answer, and telling a missing stream from one without a leader
//     ([StreamExists]); a connection that may not ask (no STREAM.INFO
//     permission, an account without JetStream) cannot tell them apart:
//     it retries until its deadline, then says it could not ask.
//     [PublishWithin] also bounds the retries when the context has no
//     deadline; a publish stored at the first attempt costs less than a
//     plain jetstream PublishMsg: one context with a timeout, and an
//     acknowledgement in the server's usual form read without
//     encoding/json (any other form is decoded as nats.go does).
//   - [WithTimeout] bounds a request whose context has no deadline.
//
// It knows nothing of tasks: callers pass stream names and subjects.
package jsapi
