// Package batcher collects items into batches for one call each: a batch is
// handed over when it holds Size items, or MaxWait after its first item
// arrived, whichever comes first. Each item's caller waits for the batch's
// outcome for it, and may leave a batch that was not handed over yet when
// its own context ends.
//
// framework.HandleBatch runs a batch handler on it: every task of a batch
// joins with its own context and receives its own outcome.
package batcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Batcher collects items of type I. Its zero value is not usable: build it
// with New.
type Batcher[I any] struct {
	size  int
	wait  time.Duration
	fn    func(ctx context.Context, items []I) error
	errOf func(*I) error // the error fn set on one item, or nil
	// panicked wraps a panic of fn: the batch fails with it.
	panicked error

	mu   sync.Mutex
	open *batch[I] // the batch filling up; nil when none
}

// New returns a Batcher that hands batches of up to size items to fn,
// waiting at most wait for a batch to fill. errOf reads the outcome fn set
// on an item (nil: succeeded unless fn returned an error). A panic of fn
// fails every item of its batch with an error wrapping panicked.
func New[I any](size int, wait time.Duration, fn func(ctx context.Context, items []I) error, errOf func(*I) error, panicked error) *Batcher[I] {
	return &Batcher[I]{size: size, wait: wait, fn: fn, errOf: errOf, panicked: panicked}
}

// batch is one batch: filling, then handed over.
type batch[I any] struct {
	entries []*entry[I]
	timer   *time.Timer
	taken   bool // handed over: no entry joins or leaves any more
}

// entry is one item waiting in a batch.
type entry[I any] struct {
	ctx  context.Context
	item I
	done chan error
}

// Join adds item to the open batch and waits for the batch's outcome for
// it. The caller whose item fills the batch runs it; a batch that does not
// fill runs when its wait ends, in the timer's goroutine. When ctx ends
// before the batch was handed over, the item leaves it and Join returns
// ctx's error; once handed over, Join waits for the outcome (the call's
// context ends when every caller's has).
func (b *Batcher[I]) Join(ctx context.Context, item I) error {
	e := &entry[I]{ctx: ctx, item: item, done: make(chan error, 1)}
	b.mu.Lock()
	bt := b.open
	if bt == nil {
		bt = &batch[I]{entries: make([]*entry[I], 0, b.size)}
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
	return <-e.done
}

// flush hands bt to fn, once, and delivers each entry's outcome.
func (b *Batcher[I]) flush(bt *batch[I]) {
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
	// The call's ctx ends when every entry's ctx has ended.
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
	items := make([]I, len(entries))
	for i, e := range entries {
		items[i] = e.item
	}
	err := b.call(ctx, items)
	for i, e := range entries {
		if ierr := b.errOf(&items[i]); ierr != nil {
			e.done <- ierr
		} else {
			e.done <- err
		}
	}
}

// call runs fn, turning a panic into an error for the batch.
func (b *Batcher[I]) call(ctx context.Context, items []I) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: batch handler: %v", b.panicked, r)
		}
	}()
	err = b.fn(ctx, items)
	if err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = fmt.Errorf("batch cancelled: every task of it ended: %w", err)
	}
	return err
}
