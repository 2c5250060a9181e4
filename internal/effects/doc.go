// Package effects owns the protocol of the effects ledger behind
// the public package effects (Once): one KV record per (task, effect key), claimed before the
// effect runs (create, or compare-and-set over a failed or abandoned
// claim), then set to done with the effect's value, or to failed when the
// effect reported that it did not happen. A later delivery finds the done
// record and skips the effect; a claim without an outcome is reported as
// uncertain, for the caller's policy to decide.
//
// The public package effects owns the API (Once, OnceValue, the policies
// and errors); package framework owns the bucket.
package effects
