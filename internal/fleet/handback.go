package fleet

import (
	"strconv"
	"time"
)

// Waits between the hand-backs of one task whose payload version its
// worker does not accept: short while a live worker accepts the version
// (it takes the task at its next fetch), doubling from RetryBase up to
// RetryMax while none does, so a version nobody serves yet costs a few
// schedules a minute, not one every 100 ms.
const (
	RetryServed = 100 * time.Millisecond
	RetryBase   = 200 * time.Millisecond
	RetryMax    = 30 * time.Second
)

// MaxHandBacks bounds the hand-back count read from a task: the header
// travels with the task and anyone who can publish one can write it.
const MaxHandBacks = 1 << 20

// Unaccepted is what a worker knows of a task whose payload version its
// handler does not accept.
type Unaccepted struct {
	// Since is the first hand-back, read from the task's header; zero when
	// it has none (this is the first) or a bad one.
	Since time.Time
	// Count is the task's hand-back count header as read from the wire.
	Count string
	// Served is true when a live worker of the registry accepts the
	// version.
	Served bool
}

// HandBack is what to do with an unaccepted task.
type HandBack struct {
	// DeadLetter is true when no live worker accepts the version and the
	// grace has passed since the first hand-back: the task fails.
	DeadLetter bool
	// Delay is how long the task waits before it comes back (when it is
	// not dead-lettered).
	Delay time.Duration
	// Since is the first hand-back: the task's, or now when it has none or
	// one in the future (a clock ahead must not extend the grace).
	Since time.Time
	// Count is the hand-backs before this one, from 0 to MaxHandBacks
	// whatever the header says.
	Count int
}

// Next returns the hand-back count the task carries once handed back.
func (h HandBack) Next() int { return h.Count + 1 }

// Decide returns what to do with u at now, given the worker's grace: a
// version nobody serves is dead-lettered once grace has passed since its
// first hand-back (at grace exactly, too); any other wait goes on, for
// RetryServed while a live worker accepts the version, else for RetryBase
// doubled with each hand-back, at most RetryMax.
func (u Unaccepted) Decide(grace time.Duration, now time.Time) HandBack {
	since := u.Since
	if since.IsZero() || since.After(now) {
		since = now
	}
	n, _ := strconv.Atoi(u.Count) // a bad header counts as none; a huge one is clamped below
	n = max(0, min(n, MaxHandBacks))
	if !u.Served && now.Sub(since) >= grace {
		return HandBack{DeadLetter: true, Since: since, Count: n}
	}
	delay := RetryServed
	if !u.Served {
		delay = min(RetryBase<<min(n, 10), RetryMax)
	}
	return HandBack{Delay: delay, Since: since, Count: n}
}
