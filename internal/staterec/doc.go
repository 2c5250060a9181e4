// Package staterec owns how task state records reach the state KV bucket:
// the key of a task ID ([Key], one to one, escaping what a KV key cannot
// hold), the writer that publishes records without waiting ([Writer]: plain
// publishes for a worker's records, acknowledged "only if new" writes for a
// client's first record, failures counted and logged sparsely), the
// ordering of an attempt's delayed "running" record and its coalesced
// progress records before its final one ([Attempt]: at most one progress
// record per [ProgressInterval], the latest value winning), the rules a
// progress obeys when reported and when read back ([CheckProgress]), the
// records a client writes after an enqueue ([Writer.Enqueued]) and a worker
// as attempts start and end ([Tracker], set up by [Prepare]: "running" after a delay, the
// outcome's record, and the final record of an untracked task that asked
// for one), the rules saying which task types are tracked and which
// records an attempt writes ([TrackedTypes], [StartOf], [FinishOf]), the
// wait for a task's final record ([Wait]: a watch of its key, started
// again on each reconnection), and the record's JSON: its encoding
// without reflection ([Record.AppendJSON]) and its decoding ([Decode]).
// The public record type (framework.TaskRecord) stays in framework, which
// builds the [Record]s it writes and converts those read back
// (internal/taskstate) into TaskRecords.
package staterec
