package keylimit

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/taskmsg"
)

// pluginName names the plugin on the worker ([framework.Worker.Plugin]).
const pluginName = "key limits"

// MaxLimit is the highest limit per key.
const MaxLimit = 1000

// typeKey is the key of a type's limit among its handler values.
type typeKey struct{}

// String names the option in the error of a worker without [Install].
func (typeKey) String() string { return "keylimit.PerKey needs keylimit.Install" }

// PerKey caps the tasks of this type running at once per task key
// ([framework.WithKey]) at n, across every worker of the cluster, on a
// worker with [Install]. Overrides set with [Set] replace n for one key, or
// for the whole type, at run time. A task over its key's limit waits
// without spending an attempt: it is set aside (its slot serves other
// tasks, heartbeats keep it alive) and tries again shortly. Tasks without
// a key are not limited. n is 1 to [MaxLimit]; an invalid n makes Register
// panic.
func PerKey(n int) framework.HandlerOption {
	if n < 1 || n > MaxLimit {
		return framework.InvalidHandlerOption(fmt.Errorf("keylimit.PerKey(%d), want 1 to %d", n, MaxLimit))
	}
	return framework.WithHandlerValue(typeKey{}, n)
}

// Waits of a task whose key has no free slot: they double from minWait to
// maxWait, with jitter, while it keeps finding none.
const (
	minWait = 5 * time.Millisecond
	maxWait = 250 * time.Millisecond
)

// limiter is a worker's per-key limits.
type limiter struct {
	w      *framework.Worker
	slots  *slotStore
	limits map[string]int // PerKey by type, fixed at Start
	ov     *overrides
	// laneTypes are the types whose lanes read the overrides (LaneLimit),
	// lanes the watch they read.
	laneTypes map[string]bool
	lanes     atomic.Pointer[overrides]

	mu    sync.Mutex
	waits map[*framework.Task]int // consecutive waits of a held task
	held  map[*lease]struct{}     // leases of running tasks, renewed by the service
	// releases queues the leases to give back (release); closed (under
	// mu) when the service stops.
	releases chan *lease
	closed   bool
}

// holdError asks the worker to set a task aside and try its key again.
type holdError struct {
	wait time.Duration
	key  string
	err  error // why, when the slots could not be read
}

func (e *holdError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("keylimit: key %q: slots unavailable, trying again in %v: %v", e.key, e.wait, e.err)
	}
	return fmt.Sprintf("keylimit: key %q at its limit, trying again in %v", e.key, e.wait)
}

func (e *holdError) Unwrap() error { return e.err }

// Install gives w per-key limits: the limits its handlers declare with
// [PerKey], and the overrides stored in the cluster ([Set]). Call it
// before Start; Start then creates the key-limits bucket
// ([github.com/jetflow-io/jetflow/streams.Names.KeyLimitsBucket]) when a
// type declares a limit. It panics when called twice on one worker or
// after Start.
func Install(w *framework.Worker) {
	x := &limiter{w: w, limits: make(map[string]int), waits: make(map[*framework.Task]int), held: make(map[*lease]struct{}),
		releases: make(chan *lease, 1024)}
	w.Use(framework.Plugin{
		Name:    pluginName,
		Value:   x,
		Keys:    []any{typeKey{}},
		Wrap:    x.wrap,
		Prepare: x.prepare,
		Service: x.service,
		Hold: func(_ *framework.Task, err error) (time.Duration, bool) {
			var h *holdError
			if errors.As(err, &h) {
				return h.wait, true
			}
			return 0, false
		},
		Finished: func(_ context.Context, t *framework.Task, _ framework.Outcome) {
			x.mu.Lock()
			delete(x.waits, t)
			x.mu.Unlock()
		},
	})
}

// wrap gates the handler of a type with a limit: it runs once the task
// holds one of its key's slots, and gives the slot back when it returns.
func (x *limiter) wrap(w *framework.Worker, taskType string, next framework.Handler) framework.Handler {
	vs := w.HandlerValues(taskType, typeKey{})
	if len(vs) == 0 {
		return next
	}
	x.limits[taskType] = vs[len(vs)-1].(int)
	return framework.HandlerFunc(func(ctx context.Context, t *framework.Task) error {
		key := t.Key()
		if key == "" {
			return next.Handle(ctx, t)
		}
		if err := taskmsg.ValidateKey(key); err != nil {
			// From the wire: never a KV key.
			return framework.Permanent(fmt.Errorf("%w: header %s: %w", framework.ErrCorruptTask, framework.HeaderKey, err))
		}
		limit := x.ov.limit(taskType, key, x.limits[taskType])
		l, err := x.slots.acquire(ctx, taskType, key, limit, t.ID)
		if err != nil || l == nil {
			return &holdError{wait: x.nextWait(t), key: key, err: err}
		}
		x.track(t, l)
		defer x.release(l)
		return next.Handle(ctx, t)
	})
}

// nextWait returns how long t waits before it tries its key again.
func (x *limiter) nextWait(t *framework.Task) time.Duration {
	x.mu.Lock()
	n := x.waits[t]
	x.waits[t] = n + 1
	x.mu.Unlock()
	d := min(minWait<<min(n, 10), maxWait)
	return d/2 + rand.N(d/2+1)
}

// track records a lease for renewal while its task runs.
func (x *limiter) track(t *framework.Task, l *lease) {
	x.mu.Lock()
	delete(x.waits, t)
	x.held[l] = struct{}{}
	x.mu.Unlock()
}

// release gives a lease back, in the background: the delete is a
// JetStream API request, queued in the server behind the others, and the
// executor goes on with its next task meanwhile. When the queue is full,
// or the worker stops, it waits for the delete itself.
func (x *limiter) release(l *lease) {
	x.mu.Lock()
	delete(x.held, l)
	queued := false
	if !x.closed {
		select {
		case x.releases <- l:
			queued = true
		default:
		}
	}
	x.mu.Unlock()
	if !queued {
		x.slots.release(l)
	}
}

// releasers is how many goroutines give slots back.
const releasers = 8

// releasing gives back the leases of the queue until it closes.
func (x *limiter) releasing(wg *sync.WaitGroup) {
	defer wg.Done()
	for l := range x.releases {
		x.slots.release(l)
	}
}

// prepare creates the bucket and starts reading the overrides when a
// type declares a limit.
func (x *limiter) prepare(ctx context.Context, w *framework.Worker) error {
	x.mu.Lock()
	lanes := len(x.laneTypes) > 0
	x.mu.Unlock()
	if len(x.limits) == 0 && !lanes {
		return nil
	}
	names := w.Names()
	if len(x.limits) > 0 {
		ttl := time.Duration(0)
		for _, typ := range w.Types() {
			if _, ok := x.limits[typ]; ok {
				ttl = max(ttl, w.AckWait(typ))
			}
		}
		s, err := newSlotStore(ctx, w.JetStream(), names, ttl, w.Logger())
		if err != nil {
			return err
		}
		x.slots = s
	} else if _, err := ensureBucket(ctx, w.JetStream(), names); err != nil {
		return err
	}
	ov, err := watchOverrides(ctx, w.JetStream(), names, w.Logger())
	if err != nil {
		return err
	}
	x.ov = ov
	x.lanes.Store(ov)
	return nil
}

// service renews the leases of running tasks every third of their TTL
// until the worker stops, and keeps the overrides current.
func (x *limiter) service(ctx context.Context, w *framework.Worker) {
	if x.ov == nil {
		return
	}
	defer x.ov.stop()
	if x.slots == nil {
		<-ctx.Done() // the overrides of lanes only
		return
	}
	var wg sync.WaitGroup
	for range releasers {
		wg.Add(1)
		go x.releasing(&wg)
	}
	defer func() {
		// Handlers may still return after the service stops: they wait
		// for their own deletes (the queue no longer takes them).
		x.mu.Lock()
		x.closed = true
		close(x.releases)
		x.mu.Unlock()
		wg.Wait()
	}()
	tick := time.NewTicker(x.slots.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		x.mu.Lock()
		ls := make([]*lease, 0, len(x.held))
		for l := range x.held {
			ls = append(ls, l)
		}
		x.mu.Unlock()
		for _, l := range ls {
			x.slots.renew(ctx, l)
		}
	}
}
