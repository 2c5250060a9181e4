// Package settle owns the decision of what the worker does with a task once
// an attempt ended: acknowledge it, hand it back for a retry after a delay,
// fail it for good (dead-letter and terminate it, or hand it back at its
// last delivery so that the server's advisory routes it), or hand it back
// unfinished at shutdown.
//
// [Decide] is a pure function of the attempt's result and the type's
// policy, testable without a server. The code that talks to the server
// carries the decision out: framework's worker (settle in worker.go) and
// the user test harness (package jetflowtest), which reports the decision
// without carrying it out.
package settle
