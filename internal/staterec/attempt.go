package staterec

import (
	"sync"
	"time"
)

// Attempt is the state-tracking state of one task while a worker holds
// it: the result the handler set, and the delayed "running" record, which
// must never be written after the attempt's final record.
type Attempt struct {
	// Result is the JSON value the handler set, nil if none.
	Result []byte

	mu    sync.Mutex
	timer *time.Timer
	final bool
}

// Started writes the "running" record with write after delay, unless
// [Attempt.Finished] comes first. A second call (an in-process rerun)
// restarts the delay.
func (a *Attempt) Started(delay time.Duration, write func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
	}
	a.timer = time.AfterFunc(delay, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if !a.final {
			write()
		}
	})
}

// Finished cancels a pending "running" record, or waits for the one being
// written, so that the final record written next comes after it. It is
// safe on a nil Attempt.
func (a *Attempt) Finished() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.final = true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
}
