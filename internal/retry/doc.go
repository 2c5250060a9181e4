// Package retry owns how jetflow waits between attempts of an operation
// that may succeed when tried again: exponential backoff with jitter on
// cenkalti/backoff, bounded by the caller's context.
//
// [Do] runs the usual loop (try, classify, wait, try again). Loops that do
// more between attempts than [Do] allows take a [Policy.New] backoff and
// wait with [Sleep]. Which errors are worth a retry is the caller's call,
// usually natserr.Transient.
package retry
