package batcher

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type item struct {
	n   int
	err error
}

func errOf(it *item) error { return it.err }

var errPanicked = errors.New("panicked")

// joinAll joins n items from n goroutines and returns their outcomes by
// item number.
func joinAll(t *testing.T, b *Batcher[item], n int) []error {
	t.Helper()
	out := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { out[i] = b.Join(t.Context(), item{n: i}) })
	}
	wg.Wait()
	return out
}

// A full batch is handed over at once (an hour's wait never passes), in one
// call, and each item gets the error the call set on it, or the call's.
func TestFullBatchRunsOnceWithEachOutcome(t *testing.T) {
	var calls [][]int
	var mu sync.Mutex
	b := New(4, time.Hour, func(_ context.Context, items []item) error {
		mu.Lock()
		defer mu.Unlock()
		var ns []int
		for i := range items {
			ns = append(ns, items[i].n)
			if items[i].n == 2 {
				items[i].err = errors.New("item 2 failed")
			}
		}
		calls = append(calls, ns)
		return nil
	}, errOf, errPanicked)
	out := joinAll(t, b, 4)
	if len(calls) != 1 || len(calls[0]) != 4 {
		t.Fatalf("calls = %v, want one call of 4 items", calls)
	}
	for i, err := range out {
		if (err != nil) != (i == 2) {
			t.Errorf("item %d: err = %v", i, err)
		}
	}
}

// A batch error fails every item without an error of its own.
func TestBatchErrorFailsItemsWithoutTheirOwn(t *testing.T) {
	boom := errors.New("sink down")
	own := errors.New("own")
	b := New(2, time.Hour, func(_ context.Context, items []item) error {
		items[0].err = own
		return boom
	}, errOf, errPanicked)
	out := joinAll(t, b, 2)
	if !(errors.Is(out[0], own) || errors.Is(out[1], own)) || !(errors.Is(out[0], boom) || errors.Is(out[1], boom)) {
		t.Fatalf("outcomes %v, want one %v and one %v", out, own, boom)
	}
}

// A batch that does not fill is handed over when its wait ends.
func TestPartialBatchRunsAfterItsWait(t *testing.T) {
	got := make(chan int, 1)
	b := New(100, 5*time.Millisecond, func(_ context.Context, items []item) error {
		got <- len(items)
		return nil
	}, errOf, errPanicked)
	if err := b.Join(t.Context(), item{}); err != nil {
		t.Fatal(err)
	}
	if n := <-got; n != 1 {
		t.Fatalf("batch of %d, want 1", n)
	}
}

// An item whose context ends before the batch is handed over leaves it:
// the call never sees it.
func TestItemLeavesBatchNotHandedOver(t *testing.T) {
	got := make(chan []item, 1)
	b := New(2, time.Hour, func(_ context.Context, items []item) error {
		got <- append([]item(nil), items...)
		return nil
	}, errOf, errPanicked)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := b.Join(ctx, item{n: 99}); !errors.Is(err, context.Canceled) {
		t.Fatalf("leaving item: %v, want context.Canceled", err)
	}
	// Two more fill the batch: the one that left is not in it.
	for i, err := range joinAll(t, b, 2) {
		if err != nil {
			t.Fatalf("item %d: %v", i, err)
		}
	}
	items := <-got
	if len(items) != 2 || items[0].n == 99 || items[1].n == 99 {
		t.Fatalf("batch %v, want items 0 and 1 only", items)
	}
}

// A panic of the call fails every item with an error wrapping panicked.
func TestPanicFailsTheBatch(t *testing.T) {
	b := New(2, time.Hour, func(context.Context, []item) error { panic("bad sink") }, errOf, errPanicked)
	for i, err := range joinAll(t, b, 2) {
		if !errors.Is(err, errPanicked) {
			t.Errorf("item %d: %v, want %v", i, err, errPanicked)
		}
	}
}

// The call's context ends once every item's context has ended, not before.
func TestCallContextEndsWithTheLastItem(t *testing.T) {
	running := make(chan context.Context)
	release := make(chan struct{})
	b := New(2, time.Hour, func(ctx context.Context, _ []item) error {
		running <- ctx
		<-release
		return ctx.Err()
	}, errOf, errPanicked)
	ctx1, cancel1 := context.WithCancel(t.Context())
	ctx2, cancel2 := context.WithCancel(t.Context())
	res := make(chan error, 2)
	go func() { res <- b.Join(ctx1, item{n: 1}) }()
	go func() { res <- b.Join(ctx2, item{n: 2}) }()
	callCtx := <-running
	cancel1()
	// A negative check: it cannot fail spuriously, only miss a late end.
	select {
	case <-callCtx.Done():
		t.Fatal("the call's context ended with one item still waiting")
	case <-time.After(50 * time.Millisecond):
	}
	cancel2()
	<-callCtx.Done()
	close(release)
	for range 2 {
		if err := <-res; err == nil {
			t.Fatal("a cancelled batch succeeded")
		}
	}
}
