package exec

import (
	"sync"
	"time"
)

// Parking keeps the timers of parked tasks: a task set aside to rerun
// later holds a timer, not a goroutine, so an outage that parks thousands
// of tasks costs a timer each. The zero value is ready to use.
type Parking[P comparable] struct {
	mu      sync.Mutex
	timers  map[P]*time.Timer
	stopped bool // nothing more is parked
}

// Park calls due(x), on a goroutine of the timer's, once d has passed. It
// returns false, and arranges nothing, once [Parking.Stop] was called: the
// caller resumes x itself.
func (k *Parking[P]) Park(x P, d time.Duration, due func(P)) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.stopped {
		return false
	}
	if k.timers == nil {
		k.timers = make(map[P]*time.Timer)
	}
	k.timers[x] = time.AfterFunc(d, func() {
		k.mu.Lock()
		delete(k.timers, x)
		k.mu.Unlock()
		due(x)
	})
	return true
}

// Stop ends parking: later calls of Park return false. It calls each with
// every task still parked and whether its timer was stopped before it
// fired (false: its due call runs or ran, concurrently with this one).
func (k *Parking[P]) Stop(each func(x P, stopped bool)) {
	k.mu.Lock()
	k.stopped = true
	timers := k.timers
	k.timers = nil
	k.mu.Unlock()
	for x, tm := range timers {
		each(x, tm.Stop())
	}
}
