package staterec

import (
	"sync"
	"time"
)

// Attempt is the state-tracking state of one task while a worker holds
// it: the result the handler set, its latest progress, and the records
// written before the final one (a delayed "running" record, coalesced
// progress records), which must never be written after it. Its methods
// are safe for concurrent use.
type Attempt struct {
	// Result is the JSON value the handler set, nil if none.
	Result []byte

	mu    sync.Mutex
	timer *time.Timer // the delayed "running" record
	final bool
	// start is when the attempt started, when a tracker saw it start.
	start time.Time
	// progress is the latest progress reported; progressTimer writes it
	// when a write is due; lastWrite is when a progress record was
	// last written.
	progress      Progress
	progressTimer *time.Timer
	lastWrite     time.Time
	// wrote is set once a record of this attempt was written before its
	// final one (running or progress).
	wrote bool
}

// Started writes the "running" record with write after delay, unless
// [Attempt.Finished] comes first. A second call (an in-process rerun)
// restarts the delay. write runs with the attempt locked.
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
			a.wrote = true
			write()
		}
	})
}

// Report keeps p as the attempt's latest progress and writes it with
// write: at once when no progress record was written within every, else
// when every has passed since the last one, with the latest value reported
// by then. A report after [Attempt.Finished] is ignored. write runs with
// the attempt locked, never after Finished returned.
func (a *Attempt) Report(p Progress, every time.Duration, write func(Progress)) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.final {
		return
	}
	a.progress = p
	if a.progressTimer != nil {
		return // a write is due: it takes the latest value
	}
	if wait := every - time.Since(a.lastWrite); !a.lastWrite.IsZero() && wait > 0 {
		a.progressTimer = time.AfterFunc(wait, func() {
			a.mu.Lock()
			defer a.mu.Unlock()
			a.progressTimer = nil
			if !a.final {
				a.writeProgress(write)
			}
		})
		return
	}
	a.writeProgress(write)
}

// writeProgress writes the latest progress; a.mu is held. A progress
// record is a "running" record: one still waiting for its delay is not
// needed any more.
func (a *Attempt) writeProgress(write func(Progress)) {
	a.lastWrite, a.wrote = time.Now(), true
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	write(a.progress)
}

// Progress returns the latest progress reported, the zero value if none.
// It is safe on a nil Attempt.
func (a *Attempt) Progress() Progress {
	if a == nil {
		return Progress{}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.progress
}

// Wrote reports whether a record of the attempt was written before its
// final one (a "running" or progress record). It is safe on a nil Attempt.
func (a *Attempt) Wrote() bool {
	if a == nil {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.wrote
}

// Finished cancels a pending "running" or progress record, or waits for
// the one being written, so that the final record written next comes after
// it. It is safe on a nil Attempt.
func (a *Attempt) Finished() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.final = true
	for _, t := range []**time.Timer{&a.timer, &a.progressTimer} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
}
