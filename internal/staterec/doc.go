// Package staterec owns how task state records reach the state KV bucket:
// the key of a task ID ([Key], one to one, escaping what a KV key cannot
// hold), the writer that publishes records without waiting ([Writer]: plain
// publishes for a worker's records, acknowledged "only if new" writes for a
// client's first record, failures counted and logged sparsely), and the
// allocation-free JSON helpers the record encoder of package framework uses.
// The record type itself (framework.TaskRecord) is public API and stays in
// framework.
package staterec
