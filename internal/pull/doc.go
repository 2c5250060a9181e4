// Package pull owns how a worker pulls tasks from a durable pull consumer:
//
//   - [Iter], an iterator that sends its own pull requests, one outstanding
//     at a time on its own reply subject with idle heartbeats, tells the
//     server's statuses from stored messages by their reply subject (a
//     producer cannot forge one with a Status header), retires exactly the
//     request a status answers and replaces a request whose heartbeats stop,
//     asks for the next batch once half of the last one was taken, and lets
//     other goroutines than its reader take ([Iter.TryNext], [Iter.TakeIf])
//     and put back ([Iter.Unget]) buffered messages, never ahead of a
//     message its reader has not passed on ([Iter.Passed]), and may pull as
//     a member of a priority group of the pinned_client policy
//     ([Iter.SetGroup]), telling its caller when it gains or loses the
//     consumer's pin;
//   - [Msg], a delivered message implementing jetstream.Msg with nats.go's
//     acknowledgement protocol;
//   - pull sizing: [Batch] chooses the size of each pull request from the
//     handler times a [Pace] measures.
//
// Stream and consumer names come from the caller; the package imports
// neither streams nor framework.
package pull
