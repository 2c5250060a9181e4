// Package asyncpub publishes messages to JetStream asynchronously through a
// window of its own, and reads their acknowledgements without nats.go's
// per-message futures.
//
// A [Window] is one subscription on a fresh inbox and a ring of slots as
// wide as the window. [Window.Publish] sends a message whose reply subject
// is the inbox and the slot's sequence, waiting while the window is full;
// [Window.Wait] waits for the acknowledgement of a sequence and frees its
// slot. There is no timer, channel or map entry per message: one timer bounds
// the wait of the one waiter, and acknowledgements are matched by their
// sequence. [ParseAck] reads a publish acknowledgement, plain ones without a
// JSON decoder.
//
// A Window is meant for one publisher and one waiter at a time (EnqueueMany
// publishes from the caller's goroutine and settles in publish order from
// another).
package asyncpub
