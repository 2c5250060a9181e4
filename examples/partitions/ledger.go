package main

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// kind is what a task of the run is.
type kind int

const (
	immediate kind = iota
	delayed
	ordered
)

// ledger records every enqueue and every run of the run's tasks and checks
// the order of each key's tasks as they start.
type ledger struct {
	mu       sync.Mutex
	want     map[string]kind   // acknowledged enqueues
	streamOf map[string]string // the stream an enqueue chose for the task
	ran      map[string]string // the stream each task first completed in
	runs     map[string]int    // completions per task
	next     map[string]int    // per key: the first sequence not yet completed
	seqsDone map[string]map[int]bool
	maxDone  map[string]int  // per key: the highest sequence completed
	failed   map[string]bool // tasks failed once on purpose
	ticks    map[string]time.Time
	tickRuns int
	maxLate  time.Duration // the latest start of a delayed task after its due time
	killedAt time.Time

	violations []string
	progress   chan struct{} // a task or tick completed
}

func newLedger() *ledger {
	return &ledger{want: map[string]kind{}, streamOf: map[string]string{}, ran: map[string]string{},
		runs: map[string]int{}, next: map[string]int{}, maxDone: map[string]int{}, seqsDone: map[string]map[int]bool{}, failed: map[string]bool{},
		ticks: map[string]time.Time{}, progress: make(chan struct{}, 1)}
}

func (l *ledger) poke() {
	select {
	case l.progress <- struct{}{}:
	default:
	}
}

// enqueued records a stored task and the task stream it went to.
func (l *ledger) enqueued(id string, k kind, stream string) {
	l.mu.Lock()
	l.want[id] = k
	l.streamOf[id] = stream
	l.mu.Unlock()
}

// start checks that a task of key, sequence seq, may run now: its
// predecessor completed, and no later task of the key completed before it.
func (l *ledger) start(id, key string, seq int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if seq > l.next[key] {
		l.violations = append(l.violations, fmt.Sprintf("%s (key %s seq %d) started before seq %d completed", id, key, seq, l.next[key]))
	}
	if m, ok := l.maxDone[key]; ok && m > seq {
		l.violations = append(l.violations, fmt.Sprintf("%s (key %s seq %d) ran after seq %d completed", id, key, seq, m))
	}
}

// failOnce reports whether this run of id should fail (the first run of
// the tasks chosen to fail once).
func (l *ledger) failOnce(id string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed[id] {
		return false
	}
	l.failed[id] = true
	return true
}

// done records a successful run of id in stream; key and seq are set for
// ordered tasks.
func (l *ledger) done(id, stream, key string, seq int) {
	l.mu.Lock()
	l.runs[id]++
	if _, ok := l.ran[id]; !ok {
		l.ran[id] = stream
	}
	if key != "" {
		if l.seqsDone[key] == nil {
			l.seqsDone[key] = map[int]bool{}
		}
		l.seqsDone[key][seq] = true
		for l.seqsDone[key][l.next[key]] {
			l.next[key]++
		}
		if m, ok := l.maxDone[key]; !ok || seq > m {
			l.maxDone[key] = seq
		}
	}
	l.mu.Unlock()
	l.poke()
}

// late records how long after its due time a delayed task started.
func (l *ledger) late(d time.Duration) {
	l.mu.Lock()
	l.maxLate = max(l.maxLate, d)
	l.mu.Unlock()
}

// tick records a run of the schedule's tick with the given key and time.
func (l *ledger) tick(key string, at time.Time) {
	l.mu.Lock()
	l.tickRuns++
	l.ticks[key] = at
	l.mu.Unlock()
	l.poke()
}

func (l *ledger) killed(at time.Time) {
	l.mu.Lock()
	l.killedAt = at
	l.mu.Unlock()
}

// completed returns how many of the run's tasks completed at least once.
func (l *ledger) completed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ran)
}

// stored returns how many enqueues were acknowledged.
func (l *ledger) stored() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.want)
}

// missing returns how many acknowledged enqueues have not completed.
func (l *ledger) missing() int {
	n, _ := l.missingOf()
	return n
}

// missingOf returns how many acknowledged enqueues have not completed, and
// says which.
func (l *ledger) missingOf() (int, string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	byKind := map[kind]int{}
	var some []string
	for id, k := range l.want {
		if _, ok := l.ran[id]; !ok {
			byKind[k]++
			if len(some) < 3 {
				some = append(some, id)
			}
		}
	}
	n := byKind[immediate] + byKind[delayed] + byKind[ordered]
	return n, fmt.Sprintf("%d immediate, %d delayed, %d ordered (%s)", byKind[immediate], byKind[delayed], byKind[ordered], strings.Join(some, " "))
}

// cronTicks returns the distinct ticks that ran, and those due after the kill.
func (l *ledger) cronTicks() (all, afterKill int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.ticks {
		if !l.killedAt.IsZero() && at.After(l.killedAt) {
			afterKill++
		}
	}
	return len(l.ticks), afterKill
}

// summary is the ledger's verdict.
type summary struct {
	enqueued, lost, duplicates, misplaced int
	byKind                                map[kind]int
	perStream                             map[string]int
	violations                            []string
	lostIDs                               []string
	ticks, tickAfterKill                  int
	maxLate                               time.Duration
}

// summarize checks the ledger; expected returns the stream a task is
// expected to run in (the one its enqueue chose).
func (l *ledger) summarize(expected func(id string, k kind, stored string) string) summary {
	s := summary{byKind: map[kind]int{}, perStream: map[string]int{}}
	s.ticks, s.tickAfterKill = l.cronTicks()
	l.mu.Lock()
	defer l.mu.Unlock()
	s.enqueued = len(l.want)
	s.maxLate = l.maxLate
	s.violations = append(s.violations, l.violations...)
	for id, k := range l.want {
		s.byKind[k]++
		stream, ok := l.ran[id]
		if !ok {
			s.lost++
			if len(s.lostIDs) < 10 {
				s.lostIDs = append(s.lostIDs, id)
			}
			continue
		}
		s.perStream[stream]++
		if want := expected(id, k, l.streamOf[id]); stream != want {
			s.misplaced++
		}
	}
	for _, n := range l.runs {
		s.duplicates += n - 1
	}
	s.duplicates += l.tickRuns - len(l.ticks)
	return s
}
