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
	"github.com/nats-io/nats.go/jetstream"

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

const leaderLossType = "fault.leader"

// failover is one injected leader loss.
type failover struct {
	what  string        // "stream leader" or "consumer leader"
	node  int           // index of the node taken down
	down  time.Duration // time to take the node down
	elect time.Duration // from the fault until stream and consumer have leaders again
	at    time.Time     // when the fault began
}

// leaderLoss is a cluster under test: how to connect to it and how to take
// the leader down in round r (then bring the node back and wait until it
// caught up).
type leaderLoss struct {
	connect func(t *testing.T, opts ...nats.Option) *nats.Conn
	fault   func(t *testing.T, r int) failover
	// partitions is the task partition count of the topology (0: one).
	partitions int
}

// TestStreamLeaderLossDuringEnqueueAndProcessing stops the task stream's
// leader (and, in the heavy variant, consumer leaders too, three times in a
// row) in a three-node embedded cluster while producers enqueue and two
// workers process tasks on an R3 topology. The node shuts down gracefully,
// handing its leaderships over, as in a rolling restart.
func TestStreamLeaderLossDuringEnqueueAndProcessing(t *testing.T) {
	t.Parallel()
	n, rounds := 2000, 1
	if heavy() {
		n, rounds = 10000, 3
	}
	names := streams.MustNames("")
	consumer := names.ConsumerName(leaderLossType, framework.PriorityNormal)
	c := testutil.RunCluster(t, 3)
	runLeaderLoss(t, n, rounds, leaderLoss{
		connect: func(t *testing.T, opts ...nats.Option) *nats.Conn { return c.Connect(t, opts...) },
		fault: func(t *testing.T, r int) failover {
			fo := failover{what: "stream leader", node: c.StreamLeader(t, names.TaskStream())}
			if r%2 == 1 {
				fo.what, fo.node = "consumer leader", c.ConsumerLeader(t, names.TaskStream(), consumer)
			}
			fo.at = time.Now()
			c.StopNode(fo.node)
			fo.down = time.Since(fo.at)
			c.StreamLeader(t, names.TaskStream())
			c.ConsumerLeader(t, names.TaskStream(), consumer)
			fo.elect = time.Since(fo.at)
			// Bring the node back and let it catch up before the next
			// round, so the stream never loses its quorum.
			c.RestartNode(t, fo.node)
			c.WaitJetStreamReady(t)
			c.WaitStreamCurrent(t, names.TaskStream())
			return fo
		},
	})
}

// TestPartitionLeaderLossDuringEnqueueAndProcessing is the leader loss on
// a topology of three task partitions, one leader per server: the leader
// of the second partition's stream stops while producers spread tasks over
// all three and two workers serve them. Every acknowledged enqueue runs.
func TestPartitionLeaderLossDuringEnqueueAndProcessing(t *testing.T) {
	t.Parallel()
	n := 2000
	if heavy() {
		n = 10000
	}
	p1 := streams.MustNames("").Partition(1)
	c := testutil.RunCluster(t, 3)
	runLeaderLoss(t, n, 1, leaderLoss{
		partitions: 3,
		connect:    func(t *testing.T, opts ...nats.Option) *nats.Conn { return c.Connect(t, opts...) },
		fault: func(t *testing.T, _ int) failover {
			fo := failover{what: "partition 1's stream leader", node: c.StreamLeader(t, p1.TaskStream())}
			fo.at = time.Now()
			c.StopNode(fo.node)
			fo.down = time.Since(fo.at)
			c.StreamLeader(t, p1.TaskStream())
			fo.elect = time.Since(fo.at)
			c.RestartNode(t, fo.node)
			c.WaitJetStreamReady(t)
			c.WaitStreamCurrent(t, p1.TaskStream())
			return fo
		},
	})
}

// runLeaderLoss enqueues n tasks with 8 producers while two workers run
// them, injects rounds faults spread over the enqueueing, and checks that
// every acknowledged enqueue ran to success. It reports duplicate
// executions, enqueue latency, stalls and goroutine counts.
func runLeaderLoss(t *testing.T, n, rounds int, ll leaderLoss) {
	t.Helper()
	nc := ll.connect(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ensure(t, js, 3, ll.partitions)

	l := newLedger()
	logs := newLogCounter()
	var successes timeline
	var slowConsumer atomic.Int64
	asyncErrs := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrSlowConsumer) {
			slowConsumer.Add(1)
		}
	})
	var workers []*framework.Worker
	for range 2 {
		w := newWorker(t, ll.connect(t, asyncErrs), framework.WithLogger(slog.New(logs)), framework.WithConcurrency(32),
			framework.WithHooks(framework.Hooks{Finished: func(_ context.Context, task *framework.Task, o framework.Outcome) {
				if o.Action != framework.ActionAck {
					return
				}

				successes.add(time.Now())
				l.success(task.ID)
			}}))
		w.HandleFunc(leaderLossType, func(ctx context.Context, task *framework.Task) error {
			l.ran(task.ID)
			return nil
		}, framework.WithAckWait(5*time.Second))
		start(t, w)
		workers = append(workers, w)
	}

	// Producers: 8 goroutines enqueueing n tasks with IDs t-0 … t-(n-1).
	var clientReconnects atomic.Int64
	cl, err := framework.NewClient(ll.connect(t, asyncErrs, nats.ReconnectHandler(func(*nats.Conn) { clientReconnects.Add(1) })),
		framework.WithLogger(slog.New(logs)))
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
				_, err := cl.Enqueue(ctx, leaderLossType, id, framework.WithID(id))
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

	var fos []failover
	baseGoroutines := 0
	for r := range rounds {
		threshold := int64(n * (r + 1) / (rounds + 1))
		testutil.Wait(t, 2*time.Minute, fmt.Sprintf("%d enqueues acknowledged", threshold), func() bool {
			return acked.Load() >= threshold
		})
		if r == 0 {
			baseGoroutines = runtime.NumGoroutine()
		}
		fos = append(fos, ll.fault(t, r))
	}

	producers.Wait()
	l.enqueueingDone()
	waitDone(t, l, 3*time.Minute, func() string {
		return consumerState(js, streams.MustNames("").ConsumerName(leaderLossType, framework.PriorityNormal))
	}, func() string {
		return fmt.Sprintf("worker stats: %+v / %+v; logs: %s", workers[0].Stats(), workers[1].Stats(), logs.summary())
	})
	testutil.Wait(t, time.Minute, "task stream empty (every task acked)", func() bool {
		return taskStreamMsgs(t, js) == 0
	})
	close(sampleStop)
	<-sampled

	rep := l.report()
	t.Logf("leader loss: n=%d %v enqueue_errors=%d max_enqueue_latency=%v slow_consumer_events=%d client_reconnects=%d",
		n, rep, enqErrs.Load(), time.Duration(maxLatency.Load()).Round(time.Millisecond), slowConsumer.Load(), clientReconnects.Load())
	for _, fo := range fos {
		t.Logf("failover (%s, node %d): down in %v; stream and consumer leaders back after %v; "+
			"longest gap between enqueue acks %v, between task successes %v",
			fo.what, fo.node, fo.down.Round(time.Millisecond), fo.elect.Round(time.Millisecond),
			acks.maxGapAfter(fo.at).Round(time.Millisecond), successes.maxGapAfter(fo.at).Round(time.Millisecond))
	}
	t.Logf("goroutines: %d before the first fault, peak %d", baseGoroutines, peakGoroutines.Load())
	t.Logf("worker and client logs: %s", logs.summary())

	if e := enqErrs.Load(); e > 0 {
		t.Errorf("%d enqueues failed despite retries; first: %v", e, firstErr.Load())
	}
	if rep.Enqueued != n-int(enqErrs.Load()) || rep.Lost != 0 {
		t.Errorf("lost tasks: %v, first: %v", rep, rep.LostIDs)
	}
	// A retry or reconnect storm would show as thousands of goroutines.
	if peak := peakGoroutines.Load(); peak > int64(2*baseGoroutines+500) {
		t.Errorf("goroutines peaked at %d (baseline %d): a retry storm?", peak, baseGoroutines)
	}
}
