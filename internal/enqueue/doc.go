// Package enqueue is the producer's machinery behind framework's Client:
// how an enqueue's options, payload and headers become a task message, and
// where that message goes.
//
//   - [Config] is one enqueue's options, which framework's EnqueueOption
//     constructors set and [Apply] applies;
//   - a client's [Builder] checks a task type and payload
//     ([Builder.Check]) and turns them and the options into the task's
//     message ([Builder.Build]): the encoded payload, its ID (or
//     none, for the stream sequence to name it, [TaskID]), the unique,
//     version and ordering headers, and the work, slot or delay subject;
//   - [Router] chooses the task partition of each task from the
//     deployment's layout, which it reads from the server and refreshes
//     ([Router.Layout], [Router.Partition]) and names the stream that
//     stores a built message ([Router.Stream]);
//   - [Reserver] takes the reservation of a unique task before it is
//     published;
//   - [Batch] publishes the tasks of a batch through an asynchronous
//     window, settles their acknowledgements in order and retries those
//     that did not come;
//   - [Builder.Stage] redirects a task to where a staging route says;
//   - [PublishError] describes a publish that failed.
//
// The package does not import framework. framework re-exports the errors
// only this package reports ([ErrEncode], [ErrOrdering]); the sentinel of
// invalid options, which framework's option constructors share, comes
// from framework as [Builder.ErrInvalid].
package enqueue
