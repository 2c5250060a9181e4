package fetch

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/liveness"
	"github.com/jetflow-io/jetflow/internal/pull"
	"github.com/jetflow-io/jetflow/internal/retry"
)

// Worker is what a fetcher needs from its worker, for pending tasks of type
// P. The per-task methods (Pending, Offer, Dispatched) are called on the
// fetch path of every task that does not start directly: an implementation
// must not allocate beyond the pending task itself.
type Worker[P any] interface {
	// Open opens a pull iterator on cons; the tasks it starts directly
	// (pull.Iter.SetDirect) continue from feed.
	Open(cons jetstream.Consumer, feed *Feed) (*pull.Iter, error)
	// Close stops it, handing back what it still buffers.
	Close(it *pull.Iter)
	// Ensure creates or finds the consumer again after a failed iterator.
	Ensure(ctx context.Context) (jetstream.Consumer, error)
	// Pending returns the pending task of msg, fetched from feed (nil for
	// a task of a rescued buffer, which gives no next message).
	Pending(msg jetstream.Msg, feed *Feed) P
	// Offer queues p for a slot.
	Offer(p P)
	// Dispatched returns the channel that receives once p got a slot.
	Dispatched(p P) <-chan struct{}
	// Withdraw takes p out of the waiting tasks; false if it was
	// dispatched meanwhile.
	Withdraw(p P) bool
	// HandBack returns p, withdrawn, to the server for immediate
	// redelivery.
	HandBack(p P, why string)
	// HandBackBuffered returns msg, left in the buffer of a stopping
	// fetcher, to the server for immediate redelivery.
	HandBackBuffered(msg jetstream.Msg)
}

// Config is a fetcher's consumer and settings.
type Config struct {
	// Consumer is the consumer pulled, ensured already.
	Consumer jetstream.Consumer
	// Loop records the fetcher's polls and waits for the stall watchdog.
	Loop *liveness.Loop
	// Log is the worker's logger, carrying the consumer's attributes
	// (task type, priority).
	Log *slog.Logger
	// AckWait is the consumer's ack wait: a task that waited half of it
	// for a slot starves the messages behind it in the buffer.
	AckWait time.Duration
}

// Fetcher pulls one consumer and feeds the worker's scheduler, holding at
// most one message outside the pull buffer at a time. Its Run is its only
// goroutine.
type Fetcher[P any] struct {
	w    Worker[P]
	cfg  Config
	feed Feed
}

// New returns the fetcher of cfg.Consumer for w; Run starts it.
func New[P any](w Worker[P], cfg Config) *Fetcher[P] {
	return &Fetcher[P]{w: w, cfg: cfg}
}

// retryPolicy spaces the attempts to resume a failed pull.
var retryPolicy = retry.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// nextPoll bounds each wait for the next message: it is how soon an idle
// fetcher notices that the worker stops. (Lost pull requests are detected
// by the iterator itself, from missed heartbeats: see internal/pull.)
const nextPoll = 250 * time.Millisecond

// ensureTimeout bounds each re-ensure of the consumer after a failure.
const ensureTimeout = 10 * time.Second

// logKeyError is the key of an error in the worker's log lines
// (framework.LogKeyError; the package cannot import framework).
const logKeyError = "error"

// errRescued ends serve after its pull buffer was emptied into the waiting
// lists because a task starved (see rescue).
var errRescued = errors.New("fetch: pull buffer rescued from starvation")

// Run pulls until stop is closed, then hands back the task it holds and
// what its buffer still has, and returns.
func (f *Fetcher[P]) Run(stop <-chan struct{}) {
	stopCtx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-stopCtx.Done():
		}
	}()
	wait := retryPolicy.New()
	cons := f.cfg.Consumer
	for {
		it, err := f.w.Open(cons, &f.feed)
		if err == nil {
			f.feed.it.Store(it)
			err = f.serve(stopCtx, it)
			f.feed.it.Store(nil)
			if stopCtx.Err() != nil {
				f.drain(it)
				f.w.Close(it)
				return
			}
			f.w.Close(it)
			if errors.Is(err, errRescued) {
				wait.Reset()
				continue // a fresh iterator at once, with a fresh pull request
			}
		}
		// The iterator failed (consumer deleted, connection trouble): log,
		// wait, re-ensure the consumer and resume.
		d := wait.NextBackOff()
		f.cfg.Log.Warn("jetflow consumer pull interrupted; retrying", slog.Duration("retry_in", d), slog.Any(logKeyError, err))
		if !retry.Sleep(stopCtx, d) {
			return
		}
		ectx, ecancel := context.WithTimeout(stopCtx, ensureTimeout)
		c, err := f.w.Ensure(ectx)
		ecancel()
		if err == nil {
			cons = c
		}
	}
}

// serve reads it until stop or a terminal iterator error.
func (f *Fetcher[P]) serve(stop context.Context, it *pull.Iter) error {
	errStreak := 0
	lh := f.cfg.Loop
	defer lh.SetBusy(false)
	// One starvation timer for the loop, re-armed per waiting task.
	starve := time.NewTimer(time.Hour)
	starve.Stop()
	defer starve.Stop()
	for {
		msg, err := it.Next(nextPoll)
		if err == nil {
			lh.Poll(it.Polled())
		} else if alive := it.Alive(); !alive.IsZero() {
			lh.Poll(alive) // an empty wait counts if the consumer answers
		}
		if err != nil {
			if stop.Err() != nil {
				return nil
			}
			if errors.Is(err, nats.ErrTimeout) {
				continue // nothing within nextPoll: check for stop
			}
			if errors.Is(err, jetstream.ErrMsgIteratorClosed) || errors.Is(err, jetstream.ErrConsumerDeleted) ||
				errors.Is(err, jetstream.ErrConsumerNotFound) {
				return err
			}
			// Transient (missed heartbeat, reconnect): the iterator recovers
			// by itself; avoid spinning.
			errStreak++
			if errStreak > 1 {
				select {
				case <-stop.Done():
					return nil
				case <-time.After(min(time.Duration(errStreak)*50*time.Millisecond, time.Second)):
				}
			}
			continue
		}
		errStreak = 0
		p := f.w.Pending(msg, &f.feed)
		if stop.Err() != nil {
			// Stopping: start nothing new. Without this check a task handed
			// back at shutdown (a held task) is redelivered at once, given a
			// free slot and run again, round and round, and Shutdown waits
			// on this loop past its deadline.
			f.w.HandBack(p, "worker stopping")
			return nil
		}
		f.w.Offer(p)
		it.Passed() // queued: the executors may take the messages behind it
		lh.SetBusy(true)
		dispatched, starved := f.awaitSlot(stop, p, starve, f.cfg.AckWait/2)
		lh.SetBusy(starved) // a rescue waits for slots too
		if starved {
			// p has waited half an ack wait for a slot: the tasks behind it
			// in the pull buffer get no heartbeats and would be redelivered
			// (spending an attempt). Take them out of the buffer, where the
			// sweeper keeps them alive, and pull again only once they ran.
			return f.rescue(stop, it, p)
		}
		if !dispatched {
			return nil
		}
	}
}
