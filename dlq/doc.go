// Package dlq lists, inspects, replays and purges the dead-letter stream of
// a jetflow topology.
//
// Workers write the records (see [framework.WithDeadLetters]): a task that
// fails permanently, cannot be decoded or fails its last attempt becomes a
// [Record] on "<prefix>.dlq.<type>" in the dead-letter stream, with why it
// died ([Reason]) and its last error in headers ([HeaderReason],
// [HeaderLastError], …). This package is the operator's side:
//
//	q := dlq.New(client)
//	recs, next, err := q.List(ctx, dlq.Filter{Type: "email.send"}, dlq.Page{})
//	info, err := q.Replay(ctx, recs[0].Seq) // same task ID, attempts from 1
//	n, err := q.Purge(ctx, dlq.Filter{Reason: dlq.ReasonDecode})
//
// # Reads and memory
//
// Records are addressed by their sequence in the dead-letter stream. Reads
// use the stream's direct get API: they leave no state on the server and
// fetch at most one batch (256 records, 4 MiB) at a time, so listing,
// replaying or purging any number of records takes bounded memory.
//
// See docs/failures.md for the record format and the router and reconciler
// that write records without a worker's help.
package dlq
