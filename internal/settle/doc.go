// Package settle owns the decision of what the worker does with a task once
// an attempt ended: acknowledge it, hand it back for a retry after a delay,
// fail it for good (dead-letter and terminate it, or hand it back at its
// last delivery so that the server's advisory routes it), or hand it back
// unfinished at shutdown.
//
// [Decide] is a pure function of the attempt's result and the type's
// policy, testable without a server. [Carry] carries a decision out on a
// [Delivery]: the Ack, Nak with delay, dead letter then Term, or Nak at
// the last delivery, never a Term of a task whose dead letter could not be
// written. The executor (internal/attempt) decides and carries out each
// settlement on the Delivery that framework's worker implements on the task
// it holds (framework/execute.go); the user test
// harness (package jetflowtest) reports the decision without carrying it
// out.
package settle
