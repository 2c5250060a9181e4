package lanes

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// Item is one delivery of a lane.
type Item[T any] struct {
	// Key is the task's key: its ordering key, or the key its cap counts.
	Key string
	// Seq is the task's stream sequence, which orders the key's tasks.
	Seq uint64
	// DSeq is the consumer's delivery sequence of this delivery; it grows
	// with every delivery, redeliveries included.
	DSeq uint64
	// V is the caller's handle on the delivery (a message, a task), which
	// the gate returns when the delivery may start.
	V T
}

// Config sets a gate's policy. The zero value runs one task of a key at a
// time and lets nothing wait for a sequence handed back to the server.
type Config struct {
	// Ordered runs a key's tasks one at a time in stream order (strict
	// FIFO): a task handed back to the server ([Gate.Done] with
	// redelivered) holds the key's later tasks until it is delivered again
	// or forgotten ([Gate.Forget]). Limit is then ignored. Default false.
	Ordered bool
	// Limit returns how many tasks of key may run at once. The gate asks
	// each time a task of the key could start, so a limit may change at
	// run time; a lower limit stops no running task, it starts fewer.
	// Values below 1 count as 1. It is called with the gate's lock held
	// and must not call the gate. Default (nil): 1 for every key.
	Limit func(key string) int
	// Now returns the time a sequence is handed back, for
	// [Gate.Awaiting]. Default (nil): time.Now.
	Now func() time.Time
}

// state is where a gate stands with the lane's pin.
type state int

const (
	isLost   state = iota // another worker may own the lane: hold nothing
	isClosed              // the pin is ours; waiting for a check to open
	isOpen                // tasks start
)

// entry is a queued delivery.
type entry[T any] struct {
	seq, dseq uint64
	v         T
}

// run is a started task: its sequence and latest delivery sequence.
type run struct{ seq, dseq uint64 }

// wait is a sequence handed back to the server, awaited again.
type wait struct {
	seq   uint64
	since time.Time
}

// keyState is what the gate holds of one key; a seq is in at most one of
// its lists.
type keyState[T any] struct {
	queue   []entry[T] // received, not started; ascending seq
	running []run
	awaited []wait
}

func (k *keyState[T]) empty() bool {
	return len(k.queue) == 0 && len(k.running) == 0 && len(k.awaited) == 0
}

func (k *keyState[T]) runIndex(seq uint64) int {
	return slices.IndexFunc(k.running, func(r run) bool { return r.seq == seq })
}

func (k *keyState[T]) waitIndex(seq uint64) int {
	return slices.IndexFunc(k.awaited, func(w wait) bool { return w.seq == seq })
}

// blocked reports whether an awaited sequence lies below seq.
func (k *keyState[T]) blocked(seq uint64) bool {
	return slices.ContainsFunc(k.awaited, func(w wait) bool { return w.seq < seq })
}

// Gate decides which deliveries of one lane may start; see the package
// documentation. A new gate is lost: it holds nothing until
// [Gate.Acquired]. A Gate is safe for concurrent use.
type Gate[T any] struct {
	mu      sync.Mutex
	cfg     Config
	state   state
	keys    map[string]*keyState[T]
	queued  int
	running int
}

// New returns a gate with the policy of cfg, lost (see [Gate.Acquired]).
func New[T any](cfg Config) *Gate[T] {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Gate[T]{cfg: cfg, keys: make(map[string]*keyState[T])}
}

// Receive adds a delivery and returns the deliveries of its key that may
// start now, in the order to start them: mostly none or it, several when
// the key's limit rose meanwhile, none while the gate is not open (see
// [Gate.Check]).
//
// When stale is set (isStale), the caller drops that delivery without
// settling it:
//   - a second delivery of a sequence that is queued: the one with the
//     lower DSeq is stale, the other stays queued;
//   - a delivery of a sequence that runs: the new delivery is stale (the
//     running task settles the sequence, which the server tracks by stream
//     sequence); [Gate.Check] counts the running task by the new DSeq
//     from then on, as it would a queued one;
//   - any delivery while the gate is lost ([Gate.Lost]): it belongs to the
//     lane's owner, to whom the server delivers it again.
//
// A delivery of an awaited sequence stops the wait: it is queued in its
// place by sequence.
func (g *Gate[T]) Receive(it Item[T]) (start []T, stale T, isStale bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state == isLost {
		return nil, it.V, true
	}
	k := g.keys[it.Key]
	if k == nil {
		k = &keyState[T]{}
		g.keys[it.Key] = k
	}
	if i := k.runIndex(it.Seq); i >= 0 {
		k.running[i].dseq = max(k.running[i].dseq, it.DSeq)
		return nil, it.V, true
	}
	i, found := slices.BinarySearchFunc(k.queue, it.Seq, func(e entry[T], seq uint64) int {
		return cmp.Compare(e.seq, seq)
	})
	if found {
		held := &k.queue[i]
		if it.DSeq <= held.dseq {
			return nil, it.V, true
		}
		stale = held.v
		held.dseq, held.v = it.DSeq, it.V
		return nil, stale, true
	}
	k.queue = slices.Insert(k.queue, i, entry[T]{it.Seq, it.DSeq, it.V})
	g.queued++
	if w := k.waitIndex(it.Seq); w >= 0 {
		k.awaited = slices.Delete(k.awaited, w, w+1)
	}
	return values(g.startLocked(it.Key, k, nil)), stale, false
}

// Done reports that the task of key and seq that the gate started is
// settled, and returns the deliveries that may start now. With
// redelivered false it was acked or terminated and is gone from the
// server; with redelivered true it was handed back (a nak) and the server
// delivers it again, so the gate awaits it (see [Gate.Awaiting]) — except
// while lost, when its next delivery goes to the lane's owner. Done of a
// task that does not run is a no-op that returns nothing.
func (g *Gate[T]) Done(key string, seq uint64, redelivered bool) []T {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.keys[key]
	if k == nil {
		return nil
	}
	i := k.runIndex(seq)
	if i < 0 {
		return nil
	}
	k.running = slices.Delete(k.running, i, i+1)
	g.running--
	if redelivered && g.state != isLost {
		k.awaited = append(k.awaited, wait{seq, g.cfg.Now()})
	}
	return g.settleLocked(key, k)
}

// Forget drops an awaited sequence that will not be delivered again (the
// server dead-lettered it after its last delivery, or it was deleted) and
// returns the deliveries that may start now. Forget of a sequence not
// awaited is a no-op that returns nothing.
func (g *Gate[T]) Forget(key string, seq uint64) []T {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.keys[key]
	if k == nil {
		return nil
	}
	i := k.waitIndex(seq)
	if i < 0 {
		return nil
	}
	k.awaited = slices.Delete(k.awaited, i, i+1)
	return g.settleLocked(key, k)
}

// Recheck returns the deliveries that may start now, reading every queued
// key's limit again: call it after limits rise. It returns nothing while
// the gate is not open.
func (g *Gate[T]) Recheck() []T {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.startAllLocked()
}

// Acquired closes the gate when the worker gains the lane's pin (its
// first delivery with a new pin ID, before that delivery is received):
// from then on it holds what it receives but starts nothing until
// [Gate.Check] opens it. Called on an open gate, it closes it again.
func (g *Gate[T]) Acquired() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state = isClosed
}

// Check opens a closed gate when the lane's consumer has no pending
// delivery the gate does not hold, and then returns the deliveries that
// may start, in the order to start them. pending and delivered come from
// one consumer-info reply: its NumAckPending and Delivered.Consumer. The
// gate opens when pending equals the number of deliveries it holds
// (queued or running) whose DSeq is at most delivered, plus the awaited
// sequences. A delivery received after the reply was made is not counted,
// so a reply that races with deliveries keeps the gate closed rather than
// open it early; the caller checks again with a later reply.
//
// open reports whether the gate is open. Check of an open gate returns
// (nil, true); of a lost one, (nil, false).
func (g *Gate[T]) Check(pending int, delivered uint64) (start []T, open bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch g.state {
	case isLost:
		return nil, false
	case isOpen:
		return nil, true
	}
	if pending != g.outstandingLocked(delivered) {
		return nil, false
	}
	g.state = isOpen
	return g.startAllLocked(), true
}

// outstandingLocked counts what the consumer should report pending if
// every pending delivery up to delivered is held or awaited here.
func (g *Gate[T]) outstandingLocked(delivered uint64) int {
	n := 0
	for _, k := range g.keys {
		for _, e := range k.queue {
			if e.dseq <= delivered {
				n++
			}
		}
		for _, r := range k.running {
			if r.dseq <= delivered {
				n++
			}
		}
		n += len(k.awaited)
	}
	return n
}

// Lost reports that the lane's pin went to another worker. The gate
// returns its queued deliveries, in stream order, for the caller to hand
// back; forgets the awaited sequences, which the server delivers to the
// new owner; keeps counting running tasks until their [Gate.Done]; and
// holds and starts nothing until [Gate.Acquired] and [Gate.Check].
func (g *Gate[T]) Lost() []T {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state = isLost
	var back []entry[T]
	for name, k := range g.keys {
		back = append(back, k.queue...)
		g.queued -= len(k.queue)
		k.queue, k.awaited = nil, nil
		g.tidyLocked(name, k)
	}
	return values(sortBySeq(back))
}

// settleLocked starts what a key's change allows and drops the key if it
// holds nothing.
func (g *Gate[T]) settleLocked(name string, k *keyState[T]) []T {
	out := g.startLocked(name, k, nil)
	g.tidyLocked(name, k)
	return values(out)
}

func (g *Gate[T]) tidyLocked(name string, k *keyState[T]) {
	if k.empty() {
		delete(g.keys, name)
	}
}

// startAllLocked starts what every key allows, in stream order.
func (g *Gate[T]) startAllLocked() []T {
	var out []entry[T]
	for name, k := range g.keys {
		out = g.startLocked(name, k, out)
	}
	return values(sortBySeq(out))
}

// startLocked moves the key's queued heads to running while the gate is
// open, the key's limit has room and, when ordered, no awaited sequence
// lies below the head; it appends them to out.
func (g *Gate[T]) startLocked(name string, k *keyState[T], out []entry[T]) []entry[T] {
	if g.state != isOpen {
		return out
	}
	for len(k.queue) > 0 && len(k.running) < g.limitLocked(name) {
		head := k.queue[0]
		if g.cfg.Ordered && k.blocked(head.seq) {
			break
		}
		k.queue[0] = entry[T]{}
		k.queue = k.queue[1:]
		g.queued--
		k.running = append(k.running, run{head.seq, head.dseq})
		g.running++
		out = append(out, head)
	}
	return out
}

func (g *Gate[T]) limitLocked(name string) int {
	if g.cfg.Ordered || g.cfg.Limit == nil {
		return 1
	}
	return max(1, g.cfg.Limit(name))
}

func sortBySeq[T any](es []entry[T]) []entry[T] {
	slices.SortFunc(es, func(a, b entry[T]) int { return cmp.Compare(a.seq, b.seq) })
	return es
}

func values[T any](es []entry[T]) []T {
	if len(es) == 0 {
		return nil
	}
	out := make([]T, len(es))
	for i, e := range es {
		out[i] = e.v
	}
	return out
}
