package framework

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
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

// MaxBatchSize bounds [Batch].Size.
const MaxBatchSize = 10000

// DefaultBatchWait is the default [Batch].MaxWait.
const DefaultBatchWait = 100 * time.Millisecond

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
		bt := &batcher[T]{size: b.Size, wait: b.MaxWait, fn: fn}
		decode := typedHandler(w.opts.codec, cfg.strictPayload, func(ctx context.Context, t *Task, v T) error {
			return bt.join(ctx, t, v)
		})
		return decode
	}, opts)
}

// batcher collects the tasks of one batch type.
type batcher[T any] struct {
	size int
	wait time.Duration
	fn   func(ctx context.Context, items []BatchItem[T]) error

	mu   sync.Mutex
	open *batch[T] // the batch filling up; nil when none
}

// batch is one batch: filling, then handed over.
type batch[T any] struct {
	entries []*batchEntry[T]
	timer   *time.Timer
	taken   bool // handed over: no entry joins or leaves any more
}

// batchEntry is one task waiting in a batch.
type batchEntry[T any] struct {
	ctx  context.Context
	item BatchItem[T]
	done chan error
}

// join adds t to the open batch and waits for the batch's outcome for it.
// The task that fills the batch runs it; a batch that does not fill runs
// when its wait ends, in the timer's goroutine.
func (b *batcher[T]) join(ctx context.Context, t *Task, v T) error {
	e := &batchEntry[T]{ctx: ctx, item: BatchItem[T]{Task: t, Payload: v}, done: make(chan error, 1)}
	b.mu.Lock()
	bt := b.open
	if bt == nil {
		bt = &batch[T]{entries: make([]*batchEntry[T], 0, b.size)}
		b.open = bt
		bt.timer = time.AfterFunc(b.wait, func() { b.flush(bt) })
	}
	bt.entries = append(bt.entries, e)
	full := len(bt.entries) == b.size
	b.mu.Unlock()
	if full {
		bt.timer.Stop()
		b.flush(bt)
	}
	select {
	case err := <-e.done:
		return err
	case <-ctx.Done():
	}
	// The task ends before its batch ran (a timeout, the worker's
	// shutdown deadline): leave the batch if it has not been handed over.
	b.mu.Lock()
	if !bt.taken {
		for i, x := range bt.entries {
			if x == e {
				bt.entries = append(bt.entries[:i], bt.entries[i+1:]...)
				break
			}
		}
		b.mu.Unlock()
		return ctx.Err()
	}
	b.mu.Unlock()
	return <-e.done // handed over: its outcome comes (the call's ctx ends with the last task's)
}

// flush hands bt to the handler, once, and delivers each entry's outcome.
func (b *batcher[T]) flush(bt *batch[T]) {
	b.mu.Lock()
	if bt.taken {
		b.mu.Unlock()
		return
	}
	bt.taken = true
	if b.open == bt {
		b.open = nil
	}
	entries := bt.entries
	b.mu.Unlock()
	if len(entries) == 0 {
		return
	}
	// The call's ctx ends when every task of the batch has ended.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	left := len(entries)
	var leftMu sync.Mutex
	for _, e := range entries {
		stop := context.AfterFunc(e.ctx, func() {
			leftMu.Lock()
			left--
			last := left == 0
			leftMu.Unlock()
			if last {
				cancel()
			}
		})
		defer stop()
	}
	items := make([]BatchItem[T], len(entries))
	for i, e := range entries {
		items[i] = e.item
	}
	err := b.call(ctx, items)
	for i, e := range entries {
		switch {
		case items[i].Err != nil:
			e.done <- items[i].Err
		case err != nil:
			e.done <- err
		default:
			e.done <- nil
		}
	}
}

// call runs the handler, turning a panic into an error for the batch.
func (b *batcher[T]) call(ctx context.Context, items []BatchItem[T]) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: batch handler: %v", ErrPanic, r)
		}
	}()
	err = b.fn(ctx, items)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = fmt.Errorf("batch cancelled: every task of it ended: %w", err)
	}
	return err
}
