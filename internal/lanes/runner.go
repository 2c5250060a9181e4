package lanes

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/retry"
)

// Worker is what a lane's [Runner] needs from the worker, generic over
// the worker's task handle P.
type Worker[P comparable] interface {
	// Open opens a pull iterator on cons (with the worker's heartbeats for
	// its buffer and its hooks for lost requests); Close stops it and ends
	// them. The runner makes it a member of the lane's priority group.
	Open(cons jetstream.Consumer) (*pull.Iter, error)
	Close(it *pull.Iter)
	// Ensure re-creates the consumer after a failed pull.
	Ensure(ctx context.Context) (jetstream.Consumer, error)
	// Pending returns the task of a delivery.
	Pending(m *pull.Msg) P
	// Offer queues p for a slot; the worker runs it and reports its
	// settlement ([Runner.Settled]).
	Offer(p P)
	// Withdraw takes p out of the tasks waiting for a slot; false if it
	// got one.
	Withdraw(p P) bool
	// HandBack returns p to the server unfinished (a nak), and reports it
	// settled.
	HandBack(p P, why string)
	// Beat tells the server that p, queued behind its key, is alive.
	Beat(p P)
}

// RunnerConfig configures a [Runner].
type RunnerConfig struct {
	// Consumer is the lane's consumer, Group its priority group (pinned
	// client policy).
	Consumer jetstream.Consumer
	Group    string
	// PinnedTTL is the consumer's: the runner's pull requests expire in
	// half of it, so that an idle owner keeps the lane.
	PinnedTTL time.Duration
	// Heartbeat is how often the tasks queued behind their key are told
	// alive; AckWait the consumer's.
	Heartbeat, AckWait time.Duration
	// Gate is the policy of the lane's keys.
	Gate Config
	// Key returns the key of a delivery (its ordering key).
	Key func(m *pull.Msg) string
	// Gone reports whether the stream no longer holds seq (acknowledged,
	// or dead-lettered after its last delivery): a sequence handed back
	// and awaited for long is forgotten then.
	Gone func(ctx context.Context, seq uint64) (bool, error)
	Log  *slog.Logger
	// Loop, when set, records the pull's polls for the worker's stall
	// watchdog.
	Loop *liveness.Loop
	// Candidate, when set, says whether this worker should own the lane
	// now (a type's lanes spread over its workers). The runner asks before
	// it pulls and between deliveries: one that should not own the lane
	// pauses its pull, runs what its last request still brings, hands
	// back what waits behind its key, lets its running tasks finish, and
	// waits until it should; the server then pins the lane to another
	// worker (at once with Unpin, else after PinnedTTL). Nil: always.
	Candidate func() bool
	// Unpin, when set, asks the server to unpin the lane's group at once,
	// for a runner that stood down holding the pin: the lane's owner, or
	// one whose last request was pinned while it stood down. Without it
	// the pin moves after PinnedTTL.
	Unpin func(ctx context.Context) error
}

// errStandDown ends a pull whose worker should not own the lane.
var errStandDown = errors.New("lanes: lane belongs to another worker")

// Runner pulls one lane and starts its tasks through a [Gate]: the
// deliveries of a key in stream order, at most the key's limit at once.
// It tells the gate when the lane's pin comes and goes: a worker that
// gains the lane starts nothing until the consumer's pending deliveries
// are all its own (a former owner's would be overtaken), and one that
// loses it hands back what it queued.
type Runner[P comparable] struct {
	w    Worker[P]
	cfg  RunnerConfig
	gate *Gate[P]
	poke chan struct{} // cap 1: the pin moved, check the gate

	mu       sync.Mutex
	held     map[P]held // received and not settled, queued or started
	check    bool       // the gate waits for a Check
	stopping bool
	pin      string // the lane's pin ID while the runner holds it
}

// held is what the runner knows of a task of the gate.
type held struct {
	key     string
	seq     uint64
	offered bool // started: given to the worker
}

// Runner timings.
const (
	// checkEvery is how often a closed gate asks the consumer for its
	// pending deliveries.
	checkEvery = 250 * time.Millisecond
	// nextPoll bounds a wait for the next delivery, to notice a stop.
	nextPoll = 250 * time.Millisecond
	// infoTimeout bounds a consumer info request.
	infoTimeout = 5 * time.Second
	// standByCheck is how often a runner that should not own its lane
	// asks again.
	standByCheck = time.Second
)

var retryPolicy = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// NewRunner returns the runner of a lane.
func NewRunner[P comparable](w Worker[P], cfg RunnerConfig) *Runner[P] {
	return &Runner[P]{w: w, cfg: cfg, gate: New[P](cfg.Gate), poke: make(chan struct{}, 1), held: make(map[P]held)}
}

// Gate returns the runner's gate, for its statistics.
func (r *Runner[P]) Gate() *Gate[P] { return r.gate }

// Run pulls the lane until stop closes, then hands back what waits and
// returns; tasks running then settle as usual ([Runner.Settled]).
func (r *Runner[P]) Run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keeper := make(chan struct{})
	go func() {
		defer close(keeper)
		r.keep(ctx)
	}()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	wait := retryPolicy.New()
	cons := r.cfg.Consumer
	for r.standBy(ctx) {
		it, err := r.w.Open(cons)
		if err == nil {
			it.SetGroup(r.cfg.Group, r.pinned)
			it.SetExpires(r.cfg.PinnedTTL / 2)
			err = r.serve(ctx, it)
			if errors.Is(err, errStandDown) {
				r.standDown(ctx, it)
				r.w.Close(it)
				wait.Reset()
				continue
			}
			// Stop pulling first: what is handed back then goes to the
			// lane's next owner, not to this iterator's open request.
			r.w.Close(it)
			r.lost("lane pull stopped")
			if ctx.Err() != nil {
				break
			}
		}
		d := wait.NextBackOff()
		r.cfg.Log.Warn("jetflow lane pull interrupted; retrying", slog.Duration("retry_in", d), slog.Any("error", err))
		if !retry.Sleep(ctx, d) {
			break
		}
		ectx, ecancel := context.WithTimeout(ctx, infoTimeout)
		if c, err := r.w.Ensure(ectx); err == nil {
			cons = c
		}
		ecancel()
	}
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	r.lost("worker stopping")
	cancel()
	<-keeper
}

// serve receives the lane's deliveries until ctx ends or the iterator
// fails.
func (r *Runner[P]) serve(ctx context.Context, it *pull.Iter) error {
	leaving := false
	for {
		msg, err := it.Next(nextPoll)
		if lh := r.cfg.Loop; lh != nil {
			if err == nil {
				lh.Poll(it.Polled())
			} else if alive := it.Alive(); !alive.IsZero() {
				lh.Poll(alive) // an empty wait counts if the consumer answers
			}
		}
		if ctx.Err() != nil {
			if m, ok := msg.(*pull.Msg); ok && !it.Unget(m) {
				r.w.HandBack(r.w.Pending(m), "worker stopping")
			}
			return nil
		}
		switch {
		case errors.Is(err, nats.ErrTimeout):
		case err != nil:
			return err
		default:
			r.receive(msg.(*pull.Msg))
		}
		if c := r.cfg.Candidate; !leaving && c != nil && !c() {
			// Another worker should own the lane: no further requests.
			// What the open one still brings runs here, as the lane is
			// still pinned to this worker; handed back, it would come
			// straight back to that request, spending a delivery each
			// time.
			leaving = true
			it.Pause()
		}
		if leaving && !it.Outstanding() && it.Queued() == 0 {
			return errStandDown
		}
	}
}

// standBy waits until the worker should own the lane ([RunnerConfig]
// Candidate); false when ctx ended first.
func (r *Runner[P]) standBy(ctx context.Context) bool {
	for c := r.cfg.Candidate; c != nil && !c(); {
		if !retry.Sleep(ctx, standByCheck) {
			return false
		}
	}
	return ctx.Err() == nil
}

// standDown gives the lane up once serve ran what its last request
// brought: what still arrives goes back, then what waits behind its key;
// the lane is unpinned. Not before the last request is done: a task handed
// back while a request of the runner is open would come straight back to
// it, again and again, each time spending a delivery.
func (r *Runner[P]) standDown(ctx context.Context, it *pull.Iter) {
	it.Pause()
	var arrived []*pull.Msg
	giveUp := time.Now().Add(r.cfg.PinnedTTL)
	for it.Outstanding() && time.Now().Before(giveUp) && ctx.Err() == nil {
		if msg, err := it.Next(nextPoll); err == nil {
			arrived = append(arrived, msg.(*pull.Msg))
		}
	}
	for m := it.TryNext(); m != nil; m = it.TryNext() {
		arrived = append(arrived, m)
	}
	for _, m := range arrived {
		r.w.HandBack(r.w.Pending(m), "lane given to another worker")
	}
	r.lost("lane given to another worker")
	if it.PinID() != "" && r.cfg.Unpin != nil {
		// No request of ours waits: the server pins the next one that
		// does, the owner's.
		uctx, cancel := context.WithTimeout(ctx, infoTimeout)
		if err := r.cfg.Unpin(uctx); err != nil {
			r.cfg.Log.Debug("jetflow lane not unpinned; it moves after its pinned TTL", slog.Any("error", err))
		}
		cancel()
	}
	r.cfg.Log.Debug("jetflow lane given up to another worker")
}

// receive gives a delivery to the gate and offers what may start.
func (r *Runner[P]) receive(m *pull.Msg) {
	p := r.w.Pending(m)
	meta, err := m.Metadata()
	if err != nil {
		r.w.HandBack(p, "lane delivery without metadata")
		return
	}
	key := r.cfg.Key(m)
	if key == "" {
		// A task without a valid key keeps the order of its slot.
		key = "\x00" + m.Subject()
	}
	r.mu.Lock()
	r.held[p] = held{key: key, seq: meta.Sequence.Stream}
	r.mu.Unlock()
	start, stale, isStale := r.gate.Receive(Item[P]{Key: key, Seq: meta.Sequence.Stream, DSeq: meta.Sequence.Consumer, V: p})
	if isStale {
		// Settled by its other delivery, or the lane's owner's: no ack,
		// no nak.
		r.mu.Lock()
		if h, ok := r.held[stale]; ok && !h.offered {
			delete(r.held, stale)
		}
		r.mu.Unlock()
	}
	r.offer(start)
}

// offer gives the tasks the gate started to the worker.
func (r *Runner[P]) offer(start []P) {
	if len(start) == 0 {
		return
	}
	r.mu.Lock()
	for _, p := range start {
		h := r.held[p]
		h.offered = true
		r.held[p] = h
	}
	r.mu.Unlock()
	for _, p := range start {
		r.w.Offer(p)
	}
}

// Settled reports that p, a task the runner offered, was settled:
// redelivered when it went back to the server (a nak), which the gate then
// awaits (ordered keys) before the key's later tasks. What the gate lets
// start then is offered.
func (r *Runner[P]) Settled(p P, redelivered bool) {
	r.mu.Lock()
	h, ok := r.held[p]
	delete(r.held, p)
	r.mu.Unlock()
	if !ok || !h.offered {
		return
	}
	r.offer(r.gate.Done(h.key, h.seq, redelivered))
}

// pinned is the iterator's word on the lane's pin: a new pin closes the
// gate until a check finds no other owner's deliveries pending; a lost
// pin hands back what waits.
func (r *Runner[P]) pinned(id string) {
	if id == "" {
		r.lost("lane pinned to another worker")
		return
	}
	r.gate.Acquired()
	r.mu.Lock()
	r.check, r.pin = true, id
	r.mu.Unlock()
	select {
	case r.poke <- struct{}{}:
	default:
	}
}

// lost hands back the tasks queued behind their keys and those offered
// that wait for a slot: another worker may own the lane now. Tasks running
// finish; the gate starts nothing until the lane is acquired again.
func (r *Runner[P]) lost(why string) {
	queued := r.gate.Lost()
	r.mu.Lock()
	r.check, r.pin = false, ""
	for _, p := range queued {
		delete(r.held, p)
	}
	var offered []P
	for p, h := range r.held {
		if h.offered {
			offered = append(offered, p)
		}
	}
	r.mu.Unlock()
	for _, p := range queued {
		r.w.HandBack(p, why)
	}
	for _, p := range offered {
		if r.w.Withdraw(p) {
			r.w.HandBack(p, why)
		}
	}
}

// keep runs beside the pull: it checks a closed gate, beats the tasks
// queued behind their keys, and forgets the sequences awaited that the
// stream no longer holds.
func (r *Runner[P]) keep(ctx context.Context) {
	tick := time.NewTicker(checkEvery)
	defer tick.Stop()
	var lastBeat, lastAwait time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-r.poke:
		}
		r.mu.Lock()
		check := r.check && !r.stopping
		r.mu.Unlock()
		if check {
			r.checkGate(ctx)
		}
		now := time.Now()
		if now.Sub(lastBeat) >= r.cfg.Heartbeat {
			lastBeat = now
			for _, p := range r.gate.Queued() {
				r.w.Beat(p)
			}
		}
		if now.Sub(lastAwait) >= r.cfg.AckWait {
			lastAwait = now
			r.forgetGone(ctx, now)
		}
	}
}

// checkGate reads the consumer's pending deliveries and opens the gate
// when they are all the runner's.
func (r *Runner[P]) checkGate(ctx context.Context) {
	ictx, cancel := context.WithTimeout(ctx, infoTimeout)
	info, err := r.cfg.Consumer.Info(ictx)
	cancel()
	if err != nil {
		return // the next tick asks again
	}
	start, open := r.gate.Check(info.NumAckPending, info.Delivered.Consumer)
	if open {
		r.mu.Lock()
		r.check = false
		r.mu.Unlock()
	}
	r.offer(start)
}

// forgetGone forgets the sequences awaited for two ack waits that the
// stream no longer holds: they will not be delivered again.
func (r *Runner[P]) forgetGone(ctx context.Context, now time.Time) {
	for _, a := range r.gate.Awaiting() {
		if now.Sub(a.Since) < 2*r.cfg.AckWait {
			continue
		}
		gctx, cancel := context.WithTimeout(ctx, infoTimeout)
		gone, err := r.cfg.Gone(gctx, a.Seq)
		cancel()
		if err == nil && gone {
			r.offer(r.gate.Forget(a.Key, a.Seq))
		}
	}
}
