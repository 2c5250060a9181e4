// Package fetch is the pulling stage of a worker: one [Fetcher] per
// consumer reads its pull iterator (internal/pull) and offers every message,
// as the worker's pending task, to the worker's scheduler, holding at most
// one task outside the pull buffer at a time. It
//
//   - waits for that task's dispatch before it reads the next message, so
//     the pull buffer, where the heartbeat sweeper keeps messages alive, is
//     where tasks wait for a slot;
//   - rescues a starving buffer: a task that waited half an ack wait for a
//     slot empties the buffer into the scheduler's waiting lists and the
//     fetcher pulls again only once they were all dispatched;
//   - hands back, when the worker stops, the task it holds and the
//     messages its buffer still has;
//   - resumes after a failed iterator (a deleted consumer, connection
//     trouble) with a backoff, re-ensuring the consumer first;
//   - records its polls for the worker's stall watchdog (internal/liveness).
//
// What it needs from the worker is the narrow [Worker] interface, generic
// over the worker's pending type; the package imports neither streams nor
// framework.
package fetch
