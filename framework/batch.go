package framework

import (
	"context"
	"fmt"
	"time"

	"github.com/jetflow-io/jetflow/internal/batcher"
)

// Batch handlers. A sink that writes rows or sends notifications in bulk
// pays per call, not per item: [HandleBatch] runs one call on up to
// Batch.Size tasks of a type. Each task still runs as a task of its own
// (its worker slot, heartbeats, attempts, retries with backoff, dead
// letters, breakers, hooks): its handler puts it in the type's open batch
// and waits for the batch's outcome. A batch is handed to the handler when
// it holds Size tasks, or MaxWait after its first task arrived, whichever
// comes first. The handler marks the tasks that failed; each is settled on
// its own.

// Batch sizes a batch handler's batches ([HandleBatch]).
type Batch struct {
	// Size is the most tasks in one call, 2 to [MaxBatchSize]. The type's
	// concurrency, and the worker's, must be at least Size: every task of
	// a batch holds its slot while the batch fills and runs.
	Size int
	// MaxWait is how long the first task of a batch waits for the others
	// before the batch is handed over as it is. Default 100 ms.
	MaxWait time.Duration
}

// BatchItem is one task of a batch.
type BatchItem[T any] struct {
	Task    *Task
	Payload T
	// Err is set by the handler when this task failed: it is retried, or
	// dead-lettered, on its own ([Permanent] works as for single tasks).
	// The tasks left with Err nil succeeded, unless the handler returned
	// an error.
	Err error
}

// HandleBatch registers fn for taskType as a batch handler: it receives up
// to b.Size tasks at once, their payloads decoded into T like [Handle]
// (a payload that cannot be decoded fails its task alone, with a
// *[DecodeError], before the batch). fn sets Err on the items that failed;
// a non-nil error returned by fn fails every item without an Err of its
// own. fn's ctx ends when every task of the batch has ended (each task's
// handler timeout, [WithTimeout], applies to its wait and the call).
//
// It panics like [Worker.Register], and when b.Size is out of range or
// larger than the type's concurrency (set [WithConcurrency] or
// [WithTypeConcurrency] to at least b.Size).
func HandleBatch[T any](w *Worker, taskType string, b Batch, fn func(ctx context.Context, items []BatchItem[T]) error, opts ...HandlerOption) {
	if fn == nil {
		panic(fmt.Sprintf("framework: nil batch handler for task type %q", taskType))
	}
	if b.Size < 2 || b.Size > MaxBatchSize {
		panic(fmt.Sprintf("framework: register %q: batch size %d, want 2 to %d", taskType, b.Size, MaxBatchSize))
	}
	if b.MaxWait < 0 {
		panic(fmt.Sprintf("framework: register %q: batch wait %v", taskType, b.MaxWait))
	}
	if b.MaxWait == 0 {
		b.MaxWait = DefaultBatchWait
	}
	w.register(taskType, nil, func(cfg *handlerConfig) Handler {
		if slots := min(cfg.concurrency, w.opts.concurrency); slots < b.Size {
			panic(fmt.Sprintf("framework: register %q: batch size %d, but the type runs at most %d tasks at once: set WithConcurrency and WithTypeConcurrency to at least %d",
				taskType, b.Size, slots, b.Size))
		}
		bt := batcher.New(b.Size, b.MaxWait, fn, func(it *BatchItem[T]) error { return it.Err }, ErrPanic)
		decode := typedHandler(w.opts.codec, cfg.strictPayload, func(ctx context.Context, t *Task, v T) error {
			return bt.Join(ctx, BatchItem[T]{Task: t, Payload: v})
		})
		return decode
	}, opts)
}
