package fetch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/internal/pull"
)

// awaitSlot waits until p is dispatched (true, false), the worker stops
// (false, false; p was handed back unless dispatched concurrently), or
// starveAfter passes (false, true; p still waits). timer is the loop's
// stopped timer: awaitSlot arms it and leaves it stopped.
func (f *Fetcher[P]) awaitSlot(stop context.Context, p P, timer *time.Timer, starveAfter time.Duration) (dispatched, starved bool) {
	ch := f.w.Dispatched(p)
	select {
	case <-ch:
		return true, false
	default:
	}
	// Since Go 1.23 a stopped or reset timer delivers no stale tick.
	timer.Reset(starveAfter)
	defer timer.Stop()
	select {
	case <-ch:
		return true, false
	case <-timer.C:
		return false, true
	case <-stop.Done():
		if f.w.Withdraw(p) {
			f.w.HandBack(p, "worker stopping")
			return false, false
		}
		return true, false
	}
}

// rescue drains the iterator's buffer into the waiting lists, where the
// heartbeat sweeper covers every task, then waits until held and rescued
// tasks were all dispatched (or the worker stops). It returns errRescued so
// that Run opens a fresh iterator.
func (f *Fetcher[P]) rescue(stop context.Context, it *pull.Iter, held P) error {
	it.Drain()
	batch := []P{held}
	// Take every message until the drain is through (the subscription
	// closes): one arriving later would be handed back by Close and spend
	// an attempt. Meanwhile the sweeper beats the queue (internal/heartbeat).
	giveUp := time.Now().Add(f.cfg.AckWait)
	for {
		msg, err := it.Next(nextPoll)
		if errors.Is(err, nats.ErrTimeout) && stop.Err() == nil && time.Now().Before(giveUp) {
			continue
		}
		if err != nil {
			break
		}
		q := f.w.Pending(msg, nil)
		f.w.Offer(q)
		batch = append(batch, q)
	}
	f.cfg.Log.Debug("jetflow fetched tasks starved; holding them with heartbeats", slog.Int("tasks", len(batch)))
	for _, q := range batch {
		if !f.awaitDispatch(stop, q) {
			// Stopping: hand back the rest still waiting.
			for _, r := range batch {
				if f.w.Withdraw(r) {
					f.w.HandBack(r, "worker stopping")
				}
			}
			return nil
		}
	}
	return errRescued
}

// awaitDispatch waits until p gets a slot; the heartbeat sweeper keeps it
// alive meanwhile, so a task held back by higher priorities does not time
// out. It returns false (after handing p back) when the worker stops first.
func (f *Fetcher[P]) awaitDispatch(stop context.Context, p P) bool {
	select {
	case <-f.w.Dispatched(p):
		return true
	case <-stop.Done():
		if f.w.Withdraw(p) {
			f.w.HandBack(p, "worker stopping")
			return false
		}
		return true // dispatched concurrently; its execution owns it
	}
}

// drainWait bounds how long a stopping fetcher waits for its subscription's
// drain: the messages the connection received but its handler had not yet
// queued when the drain began still come through it.
const drainWait = 5 * time.Second

// drain hands back the messages still in the pull buffer. It returns once
// the iterator is drained (Next says ErrClosed), or after drainWait: on a
// busy machine the subscription's handler may take longer than one wait to
// queue the last messages, which a single timeout would leave to the ack
// wait instead of handing them back.
func (f *Fetcher[P]) drain(it *pull.Iter) {
	it.Drain()
	giveUp := time.Now().Add(drainWait)
	for {
		msg, err := it.Next(200 * time.Millisecond)
		if errors.Is(err, nats.ErrTimeout) && time.Now().Before(giveUp) {
			continue
		}
		if err != nil {
			return
		}
		f.w.HandBackBuffered(msg)
	}
}
