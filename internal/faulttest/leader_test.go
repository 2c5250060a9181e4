package faulttest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// timeline keeps the times of events to find the longest stall.
type timeline struct {
	mu sync.Mutex
	ts []time.Time
}

func (tl *timeline) add(t time.Time) {
	tl.mu.Lock()
	tl.ts = append(tl.ts, t)
	tl.mu.Unlock()
}

// maxGapAfter returns the longest time between consecutive events after
// from (the first gap starts at from).
func (tl *timeline) maxGapAfter(from time.Time) time.Duration {
	tl.mu.Lock()
	ts := slices.Clone(tl.ts)
	tl.mu.Unlock()
	slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	prev, gap := from, time.Duration(0)
	for _, t := range ts {
		if t.Before(from) {
			continue
		}
		gap = max(gap, t.Sub(prev))
		prev = t
	}
	return gap
}

// TestStreamLeaderLossDuringEnqueueAndProcessing stops the task stream's
// leader (and, in the heavy variant, consumer leaders too, several times)
// while producers enqueue and two workers process tasks on an R3 topology.
// Every acknowledged enqueue must run to success; duplicate executions are
// counted and reported, as are the stalls producers and workers saw.
func TestStreamLeaderLossDuringEnqueueAndProcessing(t *testing.T) {
	t.Parallel()
	n, rounds := 2000, 1
	if heavy() {
		n, rounds = 10000, 3
	}
	const typ = "fault.leader"
	names := streams.MustNames("")
	c := testutil.RunCluster(t, 3)
	_, js := c.JetStream(t)
	ensure(t, js, 3)

	l := newLedger()
	logs := newLogCounter()
	var successes timeline
	var slowConsumer atomic.Int64
	asyncErrs := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			slowConsumer.Add(1)
		}
	})
	for range 2 {
		w := newWorker(t, c.Connect(t, asyncErrs), framework.WithLogger(slog.New(logs)), framework.WithConcurrency(32),
			framework.WithHooks(framework.Hooks{Succeeded: func(task *framework.Task, _ time.Duration) {
				successes.add(time.Now())
				l.success(task.ID)
			}}))
		w.HandleFunc(typ, func(ctx context.Context, task *framework.Task) error {
			l.ran(task.ID)
			return nil
		}, framework.WithAckWait(5*time.Second))
		start(t, w)
	}
	consumer := names.ConsumerName(typ, framework.PriorityNormal)

	// Producers: 8 goroutines enqueueing n tasks with IDs t-0 … t-(n-1).
	var clientReconnects atomic.Int64
	cl, err := framework.NewClient(c.Connect(t, asyncErrs, nats.ReconnectHandler(func(*nats.Conn) { clientReconnects.Add(1) })), framework.WithLogger(slog.New(logs)))
	if err != nil {
		t.Fatal(err)
	}
	var (
		acked      atomic.Int64
		enqErrs    atomic.Int64
		firstErr   atomic.Value
		maxLatency atomic.Int64
		acks       timeline
	)
	ids := make(chan string)
	var producers sync.WaitGroup
	for range 8 {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for id := range ids {
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				began := time.Now()
				_, err := cl.Enqueue(ctx, typ, id, framework.WithID(id))
				cancel()
				took := time.Since(began)
				for {
					old := maxLatency.Load()
					if int64(took) <= old || maxLatency.CompareAndSwap(old, int64(took)) {
						break
					}
				}
				if err != nil {
					enqErrs.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				acks.add(time.Now())
				l.enqueued(id)
				acked.Add(1)
			}
		}()
	}
	go func() {
		defer close(ids)
		for i := range n {
			select {
			case ids <- fmt.Sprintf("t-%d", i):
			case <-t.Context().Done():
				return
			}
		}
	}()

	// Goroutine count, sampled to spot a reconnect or retry storm.
	var peakGoroutines atomic.Int64
	sampleStop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-sampleStop:
				return
			case <-tick.C:
				if g := int64(runtime.NumGoroutine()); g > peakGoroutines.Load() {
					peakGoroutines.Store(g)
				}
			}
		}
	}()

	type failover struct {
		what           string
		stopped        int
		stop, elect    time.Duration
		at             time.Time
		baseGoroutines int
	}
	var fos []failover
	for r := range rounds {
		threshold := int64(n * (r + 1) / (rounds + 1))
		testutil.Wait(t, 2*time.Minute, fmt.Sprintf("%d enqueues acknowledged", threshold), func() bool {
			return acked.Load() >= threshold
		})
		fo := failover{what: "stream leader", baseGoroutines: runtime.NumGoroutine()}
		victim := c.StreamLeader(t, names.TaskStream())
		if r%2 == 1 {
			// Odd heavy rounds take the consumer leader down instead.
			fo.what = "consumer leader"
			victim = c.ConsumerLeader(t, names.TaskStream(), consumer)
		}
		fo.stopped, fo.at = victim, time.Now()
		c.StopNode(victim)
		fo.stop = time.Since(fo.at)
		c.StreamLeader(t, names.TaskStream())
		c.ConsumerLeader(t, names.TaskStream(), consumer)
		fo.elect = time.Since(fo.at)
		fos = append(fos, fo)
		// Bring the node back and let it catch up before the next round,
		// so the stream never loses its quorum.
		c.RestartNode(t, victim)
		c.WaitJetStreamReady(t)
		c.WaitStreamCurrent(t, names.TaskStream())
	}

	producers.Wait()
	l.enqueueingDone()
	waitDone(t, l, 3*time.Minute)
	testutil.Wait(t, time.Minute, "task stream empty (every task acked)", func() bool {
		return taskStreamMsgs(t, js) == 0
	})
	close(sampleStop)
	<-sampled

	rep := l.report()
	t.Logf("leader loss: n=%d %v enqueue_errors=%d max_enqueue_latency=%v slow_consumer_events=%d client_reconnects=%d", n, rep, enqErrs.Load(),
		time.Duration(maxLatency.Load()).Round(time.Millisecond), slowConsumer.Load(), clientReconnects.Load())
	for _, fo := range fos {
		t.Logf("failover (%s, node %d): node stopped in %v; stream and consumer leaders ready after %v; "+
			"longest enqueue stall after %v, longest processing stall %v; goroutines %d before, peak %d",
			fo.what, fo.stopped, fo.stop.Round(time.Millisecond), fo.elect.Round(time.Millisecond),
			acks.maxGapAfter(fo.at).Round(time.Millisecond), successes.maxGapAfter(fo.at).Round(time.Millisecond),
			fo.baseGoroutines, peakGoroutines.Load())
	}
	t.Logf("worker and client logs: %s", logs.summary())

	if e := enqErrs.Load(); e > 0 {
		t.Errorf("%d enqueues failed despite retries; first: %v", e, firstErr.Load())
	}
	if rep.Enqueued != n-int(enqErrs.Load()) || rep.Lost != 0 {
		t.Errorf("lost tasks: %v, first: %v", rep, rep.LostIDs)
	}
	// A retry or reconnect storm would show as thousands of goroutines.
	if peak, base := peakGoroutines.Load(), int64(fos[0].baseGoroutines); peak > 2*base+500 {
		t.Errorf("goroutines peaked at %d (baseline %d): a retry storm?", peak, base)
	}
}
