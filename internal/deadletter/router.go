package deadletter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/internal/jsapi"
	"github.com/jetflow-io/jetflow/internal/retry"
)

// The dead-letter router moves tasks that reached their max deliveries
// without their worker's help to the dead-letter stream. The server emits a
// max-deliveries advisory for each of them, once, and only while someone
// listens; the advisory stream ([streams.Names.AdvisoryStream]) listens at
// all times, so advisories wait there while no router runs. Every worker
// runs a router on the same durable consumer of that stream: each advisory
// goes to one of them, and one that is not acknowledged (its router died)
// goes to another after the ack wait.
//
// For an advisory the router reads the task by its sequence from the task
// stream (not found: already routed, acknowledge), writes its record with
// the deduplication ID "dlq-<stream>-<seq>", marks it dead in the errors
// bucket, deletes it from the task stream and acknowledges the advisory.
// A crash between any two steps repeats the steps on redelivery, without a
// second record: the stream drops the duplicate within its duplicate window,
// and the "dead" key of the errors bucket covers the time after it.
//
// The reconciler finds max-delivered tasks whose advisory was lost (see
// reconciler.pass) and routes them the same way.

// dlqRouterConsumer is the durable consumer of the advisory stream shared by
// every router.
const dlqRouterConsumer = "dlq-router"

// Advisory subject prefixes.
const (
	advisoryMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES."
	advisoryTerminated    = "$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED."
)

// dlqAdvisory holds the fields of a consumer advisory the router reads.
type dlqAdvisory struct {
	Time       time.Time `json:"timestamp"`
	Stream     string    `json:"stream"`
	Consumer   string    `json:"consumer"`
	StreamSeq  uint64    `json:"stream_seq"`
	Deliveries uint64    `json:"deliveries"`
}

func routerConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       dlqRouterConsumer,
		Description:   "jetflow dead-letter router: moves max-delivered tasks to the dead-letter stream",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       30 * time.Second,
		MaxDeliver:    -1,
		MaxAckPending: 4096, // tasks confirmed dead wait routerGrace unacknowledged
	}
}

// advisoryRetry spaces the redeliveries of an advisory whose task could not
// be routed.
var advisoryRetry = retry.Policy{Min: time.Second, Max: time.Minute, Jitter: 0.5}

// routerRetry spaces the restarts of the dead-letter router.
var routerRetry = retry.Policy{Min: 250 * time.Millisecond, Max: 10 * time.Second}

// RunRouter routes advisories until ctx ends, recreating its consumer when
// it disappears.
func (c *Core) RunRouter(ctx context.Context) {
	wait := routerRetry.New()
	for {
		err := c.routeAdvisories(ctx)
		if ctx.Err() != nil {
			return
		}
		d := wait.NextBackOff()
		c.log.Warn("jetflow dead-letter router interrupted; retrying", slog.Duration("retry_in", d), slog.Any(logKeyError, err))
		if !retry.Sleep(ctx, d) {
			return
		}
	}
}

// routeAdvisories consumes the advisory stream with routers handlers
// until ctx ends or the consumer is lost.
func (c *Core) routeAdvisories(ctx context.Context) error {
	cctx, cancel := jsapi.WithTimeout(ctx)
	cons, err := c.js.CreateOrUpdateConsumer(cctx, c.topo.AdvisoryStream, routerConsumerConfig())
	cancel()
	if err != nil {
		return fmt.Errorf("framework: dead-letter router consumer on %s: %w", c.topo.AdvisoryStream, err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	defer rcancel()
	msgs := make(chan jetstream.Msg)
	lost := make(chan error, 1)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		select {
		case msgs <- m:
		case <-rctx.Done(): // not acknowledged: redelivered after the ack wait
		}
	}, jetstream.PullMaxMessages(2*routers), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
			select {
			case lost <- err:
			default:
			}
		}
	}))
	if err != nil {
		return fmt.Errorf("framework: dead-letter router: %w", err)
	}
	var wg, later sync.WaitGroup
	for range routers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case m := <-msgs:
					c.handleAdvisory(rctx, m, &later)
				case <-rctx.Done():
					return
				}
			}
		}()
	}
	select {
	case <-ctx.Done():
	case err = <-lost:
	}
	rcancel()
	cc.Stop()
	wg.Wait()
	later.Wait()
	<-cc.Closed()
	return err
}

// handleAdvisory routes the task of a max-deliveries advisory and
// acknowledges the advisory; on failure it asks for a later redelivery.
// Termination advisories are acknowledged: a worker terminates a task only
// after writing its record.
func (c *Core) handleAdvisory(ctx context.Context, m jetstream.Msg, later *sync.WaitGroup) {
	switch subj := m.Subject(); {
	case strings.HasPrefix(subj, advisoryMaxDeliveries):
	case strings.HasPrefix(subj, advisoryTerminated):
		c.acked(m, "ack", m.Ack()) // the worker wrote the record before terminating
		return
	default:
		c.acked(m, "ack", m.Ack())
		return
	}
	var adv dlqAdvisory
	if err := json.Unmarshal(m.Data(), &adv); err != nil || adv.StreamSeq == 0 {
		c.log.Warn("jetflow dead-letter router: unreadable advisory dropped", slog.String("subject", m.Subject()), slog.Any(logKeyError, err))
		c.acked(m, "term", m.Term())
		return
	}
	// The task's own stream: this core's, or another task partition's.
	d := c
	if adv.Stream != c.topo.TaskStream {
		if c.Partitions != nil {
			d = c.Partitions(adv.Stream)
		}
		if d == nil || d.topo.TaskStream != adv.Stream {
			c.acked(m, "ack", m.Ack())
			return
		}
	}
	rctx, cancel := context.WithTimeout(ctx, jsapi.DefaultTimeout)
	found, err := d.confirmAdvisory(rctx, &adv)
	cancel()
	if err != nil || found == nil {
		c.settleAdvisory(ctx, m, adv, err)
		return
	}
	// Confirmed: look again after the grace period, without holding one of
	// the routers meanwhile (a burst of dead tasks would otherwise be
	// routed at routers per grace period). The advisory stays unacknowledged
	// until then; the router consumer's MaxAckPending bounds these waits.
	later.Add(1)
	go func() {
		defer later.Done()
		if !retry.Sleep(ctx, routerGrace) {
			return // stopping: another router gets it after the ack wait
		}
		rctx, cancel := context.WithTimeout(ctx, 2*jsapi.DefaultTimeout)
		err := d.routeConfirmed(rctx, *found, adv)
		cancel()
		c.settleAdvisory(ctx, m, adv, err)
	}()
}

// settleAdvisory acknowledges advisory m after its task was handled, or
// asks for a later redelivery when err says it could not be.
func (c *Core) settleAdvisory(ctx context.Context, m jetstream.Msg, adv dlqAdvisory, err error) {
	if err != nil {
		if ctx.Err() != nil {
			return // stopping: another router gets it after the ack wait
		}
		attempt := 1
		if md, merr := m.Metadata(); merr == nil {
			attempt = int(md.NumDelivered)
		}
		delay := advisoryRetry.Delay(attempt)
		log := c.log.Warn
		if errors.Is(err, errAwaited) {
			log = c.log.Debug // common: the consumer has not moved past the task yet
		}
		log("jetflow dead-letter router could not route a task; retrying", slog.Uint64("stream_seq", adv.StreamSeq),
			slog.String("consumer", adv.Consumer), slog.Duration("retry_in", delay), slog.Any(logKeyError, err))
		c.acked(m, "nak", m.NakWithDelay(delay))
		return
	}
	c.acked(m, "ack", m.Ack())
}

// acked logs and counts an Ack, Nak or Term of an advisory that could not be
// sent: the advisory comes back after the router consumer's ack wait.
func (c *Core) acked(m jetstream.Msg, op string, err error) {
	if err == nil {
		return
	}
	if c.AckErrors != nil {
		c.AckErrors.Add(1)
	}
	c.log.Warn("jetflow dead-letter router could not "+op+" an advisory; it will be redelivered",
		slog.String("subject", m.Subject()), slog.Any(logKeyError, err))
}

// routerGrace is the time between the router's confirmation of a task and
// its second look (confirmAdvisory). The gap it covers, between the ack
// floor passing an acknowledged task and the task's deletion, is one of
// milliseconds; it costs every routed task as much latency, and a burst
// of them a rate of the router consumer's MaxAckPending per routerGrace.
const routerGrace = 250 * time.Millisecond

// errAwaited reports an advisory's task that its consumer may still await
// an acknowledgement for: the advisory is tried again later.
var errAwaited = errors.New("its consumer may still await its acknowledgement")

// confirmAdvisory returns the task an advisory names if it is still in the
// task stream, is the task the advisory was about, and its consumer's state
// confirms that it reached its max deliveries; nil when there is nothing to
// route. routeConfirmed routes it after a grace period.
//
// An advisory is a message like any other: whoever may publish on the
// advisory subjects can forge one, naming any sequence. So the router takes
// from it only which task to look at, and asks the task's consumer, as the
// reconciler does (see reconciler): a task the consumer has not delivered is
// not dead (the advisory is dropped); one it may still await an ack for (in
// flight, waiting for a redelivery, or dead but with the ack floor not yet
// past it) is looked at again later (errAwaited). A confirmed task is routed
// only if it is still stored routerGrace after the confirmation: the
// server moves the ack floor a moment before it deletes an acknowledged
// task, so a task acknowledged at the moment of the confirmation would pass
// it, and is gone by then.
func (c *Core) confirmAdvisory(ctx context.Context, adv *dlqAdvisory) (*jsapi.Stored, error) {
	found, err := c.storedTask(ctx, adv.StreamSeq)
	if err != nil || found == nil {
		return nil, err // nil, nil: routed already
	}
	_, _, consumer, ok := c.topo.Work(found.Subject)
	if !ok && c.topo.ReadsSlot != nil && c.topo.ReadsSlot(found.Subject, adv.Consumer) {
		// An ordered task: its partition consumer's name depends on the
		// partition count, which only the advisory names (checked here).
		consumer, ok = adv.Consumer, true
	}
	if !ok || consumer != adv.Consumer {
		// Not a jetflow task consumer's message: not ours to move.
		c.log.Warn("jetflow dead-letter router: max-delivered message left in place", slog.Uint64("stream_seq", adv.StreamSeq),
			slog.String("subject", found.Subject), slog.String("consumer", adv.Consumer))
		return nil, nil
	}
	if !adv.Time.IsZero() && found.Time.After(adv.Time.Add(time.Minute)) {
		// Stored after the advisory was emitted: the sequence was reused by
		// a recreated task stream, this is another task.
		c.log.Warn("jetflow dead-letter router: stale advisory ignored", slog.Uint64("stream_seq", adv.StreamSeq),
			slog.Time("advisory_time", adv.Time), slog.Time("message_time", found.Time))
		return nil, nil
	}
	if info := c.recentConsumer(consumer); info != nil && found.Seq <= deadBound(info) {
		// A burst of dead tasks of one consumer shares one request: what
		// confirmed a task stays true (the ack floor only moves up, and a
		// dead task is not delivered again), and the second look catches
		// one acknowledged since.
		return c.confirmed(found, adv, info), nil
	}
	ci, err := c.js.Consumer(ctx, c.topo.TaskStream, consumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		// Nobody can confirm it; the task is stranded, and reported so.
		c.log.Warn("jetflow dead-letter router: advisory of a consumer that does not exist ignored",
			slog.Uint64("stream_seq", adv.StreamSeq), slog.String("consumer", consumer))
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("framework: consumer %s: %w", consumer, err)
	}
	info := ci.CachedInfo()
	c.rememberConsumer(consumer, info)
	switch {
	case found.Seq > info.Delivered.Stream:
		c.log.Warn("jetflow dead-letter router: advisory of a task its consumer has not delivered ignored",
			slog.Uint64("stream_seq", adv.StreamSeq), slog.String("consumer", consumer),
			slog.Uint64("delivered_stream_seq", info.Delivered.Stream))
		return nil, nil
	case found.Seq > deadBound(info):
		return nil, errAwaited
	}
	return c.confirmed(found, adv, info), nil
}

// confirmed returns found, a task confirmed dead by its consumer's info,
// after calling the test hook. The advisory's delivery count goes into the
// record: whoever published the advisory chose it, so it is bounded by the
// consumer's MaxDeliver, which a dead task reached.
func (c *Core) confirmed(found *jsapi.Stored, adv *dlqAdvisory, info *jetstream.ConsumerInfo) *jsapi.Stored {
	if md := info.Config.MaxDeliver; md > 0 && adv.Deliveries > uint64(md) {
		adv.Deliveries = uint64(md)
	}
	if h := confirmedHook.Load(); h != nil {
		(*h)(found.Seq)
	}
	return found
}

// deadBound returns the last sequence that info, a task consumer's state,
// shows delivered and no longer awaited (see reconciler): a task stored at
// or below it is max-delivered.
func deadBound(info *jetstream.ConsumerInfo) uint64 {
	if info.NumAckPending == 0 {
		return info.Delivered.Stream
	}
	return info.AckFloor.Stream
}

// consumerMemo is how long the router reuses a task consumer's state.
const consumerMemo = 100 * time.Millisecond

// recentConsumer returns the state of consumer read less than consumerMemo
// ago, or nil.
func (c *Core) recentConsumer(name string) *jetstream.ConsumerInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.consumers[name]; ok && time.Since(e.at) < consumerMemo {
		return e.info
	}
	return nil
}

// rememberConsumer keeps info, consumer's state read now, for
// recentConsumer; the entries of other consumers that are too old go.
func (c *Core) rememberConsumer(name string, info *jetstream.ConsumerInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	for k, e := range c.consumers {
		if now.Sub(e.at) >= consumerMemo {
			delete(c.consumers, k)
		}
	}
	c.consumers[name] = consumerState{info: info, at: now}
}

type consumerState struct {
	info *jetstream.ConsumerInfo
	at   time.Time
}

// routeConfirmed routes found, a task confirmed by confirmAdvisory, if it
// is still stored: an acknowledged task is gone by then.
func (c *Core) routeConfirmed(ctx context.Context, found jsapi.Stored, adv dlqAdvisory) error {
	again, err := c.storedTask(ctx, found.Seq)
	if err != nil || again == nil || !again.Time.Equal(found.Time) {
		return err // acknowledged after all (nil), or try again
	}
	return c.routeStored(ctx, *again, int(adv.Deliveries), routedByRouter)
}

// confirmedHook, when set, is called when confirmAdvisory has confirmed a
// task, before its grace period.
var confirmedHook atomic.Pointer[func(seq uint64)]

// SetConfirmedHookForTest makes every router call f with the sequence of
// each task it confirms, before the grace period after which it looks
// again (nil: none). For tests that act in that window.
func SetConfirmedHookForTest(f func(seq uint64)) {
	if f == nil {
		confirmedHook.Store(nil)
		return
	}
	confirmedHook.Store(&f)
}

// storedTask returns the task stored at seq in the task stream, nil when
// there is none.
func (c *Core) storedTask(ctx context.Context, seq uint64) (*jsapi.Stored, error) {
	var found *jsapi.Stored
	_, err := jsapi.DirectGet(ctx, c.nc, c.topo.TaskStream, jsapi.GetRequest{Seq: seq}, func(m jsapi.Stored) error {
		found = &m
		return nil
	})
	return found, err
}
