package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/internal/topology"
	"github.com/jetflow-io/jetflow/streams"
	"github.com/jetflow-io/jetflow/testutil"
)

// Task types (and raw subjects) of the figures. Each figure has its own, so
// consumers and leftovers never mix.
const (
	typeDrain    = "bench.drain"    // jetflow drain
	typeRawDrain = "bench.rawdrain" // raw drain: subject and consumer of the raw side
	typeEnqueue  = "bench.enqueue"  // jetflow enqueue
	typeRawEnq   = "bench.rawenq"   // raw enqueue subject
	typeLatency  = "bench.latency"
	typeDelay    = "bench.delay"
	typeRawDelay = "bench.rawdelay" // raw delay: target subject and consumer
	typePriority = "bench.priority"
	typeRawLat   = "bench.rawlat" // raw side of latency_10k/20k: subject and consumer
)

// env is the embedded server, its topology and an admin connection, shared
// by every figure of one run.
type env struct {
	cfg     config
	stderr  io.Writer
	dir     string
	srv     *server.Server
	admin   *nats.Conn
	js      jetstream.JetStream
	stream  jetstream.Stream
	names   streams.Names
	payload json.RawMessage // drain and enqueue payload, the same bytes on both sides
	// jfClientOpts are added to the jetflow clients of the drain and enqueue
	// figures (the *_nodedup variants set WithDedup(false)).
	jfClientOpts []framework.ClientOption

	url    string      // set: connections go over TCP to url, not in-process to srv
	server *standalone // the nats-server process behind url, if the bench started it
	tcp    *env        // the env of the TCP figures, created at first use
	// servers are the nats-server processes behind url the soak started.
	servers []*standalone

	cluster *testutil.Cluster // the embedded cluster behind srv, if any
}

// benchConfig is the stream configuration the bench ensures on its servers.
var benchConfig = streams.Config{Storage: jetstream.FileStorage, AllowTaskPurge: true}

// topology is the stream configuration of e's servers: [benchConfig], at
// clusterReplicas on the cluster of the cluster_drain figure, with the
// task stream's cap of -max-task-bytes.
func (e *env) topology() streams.Config {
	c := benchConfig
	c.MaxTaskBytes = e.cfg.maxTaskBytes
	if e.cluster != nil {
		c.Replicas = clusterReplicas
	}
	return c
}

func newEnv(ctx context.Context, cfg config, stderr io.Writer) (_ *env, err error) {
	e := &env{cfg: cfg, stderr: stderr, names: streams.MustNames("")}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	e.dir, err = os.MkdirTemp("", "jetflow-bench-")
	if err != nil {
		return nil, fmt.Errorf("bench: store dir: %w", err)
	}
	e.srv, err = testutil.StartServer(&server.Options{
		JetStream:          true,
		StoreDir:           e.dir,
		DontListen:         true,
		NoLog:              true,
		NoSigs:             true,
		JetStreamMaxMemory: 256 << 20,
		JetStreamMaxStore:  8 << 30,
	})
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	e.admin, err = e.connect()
	if err != nil {
		return nil, err
	}
	e.js, err = jetstream.New(e.admin)
	if err != nil {
		return nil, fmt.Errorf("bench: jetstream: %w", err)
	}
	if _, err := streams.Ensure(ctx, e.js, e.topology()); err != nil {
		return nil, fmt.Errorf("bench: ensure topology: %w", err)
	}
	// Task state records go to buckets a worker would create at start;
	// create them now so that records written before (pre-enqueued tasks)
	// are kept, as in a deployment where workers already ran.
	if err := framework.EnsureBuckets(ctx, e.js); err != nil {
		return nil, fmt.Errorf("bench: ensure buckets: %w", err)
	}
	e.stream, err = e.js.Stream(ctx, e.names.TaskStream())
	if err != nil {
		return nil, fmt.Errorf("bench: task stream: %w", err)
	}
	// A JSON document of cfg.payloadSize bytes: {"pad":"xxxx…"}.
	pad := max(cfg.payloadSize-len(`{"pad":""}`), 0)
	e.payload = json.RawMessage(`{"pad":"` + strings.Repeat("x", pad) + `"}`)
	return e, nil
}

func (e *env) close() {
	if e.tcp != nil {
		e.tcp.close()
	}
	if e.server != nil {
		defer e.server.stop()
	}
	if e.admin != nil {
		e.admin.Close()
	}
	if e.srv != nil {
		testutil.ShutdownServer(e.srv)
	}
	if e.dir != "" {
		_ = os.RemoveAll(e.dir)
	}
}

// connect opens a new connection, in-process or over TCP to -url; the caller
// closes it.
func (e *env) connect() (*nats.Conn, error) {
	if e.url != "" {
		nc, err := nats.Connect(e.url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			return nil, fmt.Errorf("bench: connect %s: %w", e.url, err)
		}
		return nc, nil
	}
	nc, err := testutil.ConnectServer(e.srv)
	if err != nil {
		return nil, fmt.Errorf("bench: connect: %w", err)
	}
	return nc, nil
}

func (e *env) progress(format string, args ...any) {
	fmt.Fprintf(e.stderr, "bench: "+format+"\n", args...)
}

// tracking is the state tracking option of the latency, delay and priority
// figures' clients and workers: off (jetflow's default) unless -state on.
func (e *env) tracking() interface {
	framework.ClientOption
	framework.WorkerOption
} {
	return framework.WithStateTracking(e.cfg.state == "on")
}

// prefetch is the pull buffer of both sides: -prefetch, or jetflow's default
// for the configured concurrency.
func (e *env) prefetch() int {
	if e.cfg.prefetch > 0 {
		return e.cfg.prefetch
	}
	return min(e.cfg.concurrency, framework.MaxPrefetch)
}

// run measures the selected figures in order and prints their RESULT lines.
func run(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	e, err := newEnv(ctx, cfg, stderr)
	if err != nil {
		return err
	}
	defer e.close()
	e.progress("%s %s/%s, %d CPUs, GOMAXPROCS %d; n=%d runs=%d concurrency=%d window=%d prefetch=%d",
		runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.GOMAXPROCS(0),
		cfg.n, cfg.runs, cfg.concurrency, cfg.window, e.prefetch())
	figures := []struct {
		name string
		fn   func(context.Context, io.Writer) error
	}{
		{figDrain, e.figureDrain},
		{figEnqueue, e.figureEnqueue},
		{figLatency, e.figureLatency},
		{figDelay, e.figureDelay},
		{figPriority, e.figurePriority},
		{figEnqueueOne, e.figureEnqueueOne},
		{figLatency10k, func(ctx context.Context, out io.Writer) error {
			return e.figureLatencyAt(ctx, out, figLatency10k, 10000)
		}},
		{figLatency20k, func(ctx context.Context, out io.Writer) error {
			return e.figureLatencyAt(ctx, out, figLatency20k, 20000)
		}},
		{figDrainTCP, e.figureDrainTCP},
		{figLatency10kTCP, func(ctx context.Context, out io.Writer) error {
			return e.figureLatencyTCP(ctx, out, figLatency10kTCP, 10000)
		}},
		{figLatency20kTCP, func(ctx context.Context, out io.Writer) error {
			return e.figureLatencyTCP(ctx, out, figLatency20kTCP, 20000)
		}},
		{figDrainNoDedup, e.figureDrainNoDedup},
		{figEnqueueNoDedup, e.figureEnqueueNoDedup},
		{figDrainState, e.runDrainState},
		{figDLQ, e.runDLQ},
		{figWorkflow, func(ctx context.Context, out io.Writer) error { return runWorkflow(ctx, e, out) }},
		// The cluster figure starts its own three-node cluster.
		{figCluster, func(ctx context.Context, out io.Writer) error { return runClusterDrain(ctx, cfg, out, stderr) }},
		{figUnique, e.runUnique},
		{figRateLimitCost, e.runRateLimitCost},
		{figOrdering, e.runOrdering},
		{figBatch, e.runBatch},
		{figDrainTypes, e.figureDrainTypes},
		{figWaitEvent, e.runWaitEvent}, {figEarlyEvent, e.runEarlyEvent},
		{figFanout, e.runFanout},
		{figDebounce, e.runDebounce},
		{figFairness, e.runFairness},
		{figBacklog, e.figureBacklog},
		// The scale-out figure starts its own capped cluster.
		{figScaleOut, func(ctx context.Context, out io.Writer) error { return runScaleOut(ctx, cfg, out, stderr) }},
		{figLanes, e.runLanes},
	}
	for _, f := range figures {
		if !cfg.only[f.name] {
			continue
		}
		start := time.Now()
		if err := f.fn(ctx, stdout); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
		e.progress("%s done in %v", f.name, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// waitFor waits for ch to close, for at most the configured timeout.
func (e *env) waitFor(ctx context.Context, ch <-chan struct{}, what string) error {
	t := time.NewTimer(e.cfg.timeout)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return fmt.Errorf("bench: timed out after %v waiting for %s", e.cfg.timeout, what)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitConsumerEmpty waits until a consumer has nothing pending or
// unacknowledged: every task was acknowledged and removed.
func (e *env) waitConsumerEmpty(ctx context.Context, name string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := e.js.Consumer(ctx, e.names.TaskStream(), name)
		if err != nil {
			return fmt.Errorf("bench: consumer %s: %w", name, err)
		}
		ci := c.CachedInfo()
		if ci.NumPending == 0 && ci.NumAckPending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench: consumer %s still has %d pending and %d unacknowledged tasks",
				name, ci.NumPending, ci.NumAckPending)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// subjectCount returns the number of stored messages on subject.
func (e *env) subjectCount(ctx context.Context, subject string) (uint64, error) {
	info, err := e.stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return 0, fmt.Errorf("bench: stream info: %w", err)
	}
	return info.State.Subjects[subject], nil
}

func (e *env) purge(ctx context.Context, subject string) error {
	if err := e.stream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
		return fmt.Errorf("bench: purge %s: %w", subject, err)
	}
	return nil
}

// enqueueJobs enqueues n tasks of taskType with jetflow's client on a fresh
// connection (asynchronous publishes), all with the same payload and options.
func (e *env) enqueueJobs(ctx context.Context, taskType string, n int, payload any, opts ...framework.EnqueueOption) error {
	return e.enqueueJobsClient(ctx, nil, taskType, n, payload, opts...)
}

// enqueueJobsClient is enqueueJobs with extra client options.
func (e *env) enqueueJobsClient(ctx context.Context, clientOpts []framework.ClientOption, taskType string, n int, payload any, opts ...framework.EnqueueOption) error {
	nc, err := e.connect()
	if err != nil {
		return err
	}
	defer nc.Close()
	cl, err := framework.NewClient(nc, append([]framework.ClientOption{framework.WithMaxPending(e.cfg.window)}, clientOpts...)...)
	if err != nil {
		return err
	}
	jobs := make([]framework.TaskSpec, n)
	for i := range jobs {
		jobs[i] = framework.TaskSpec{Type: taskType, Payload: payload, Options: opts}
	}
	if _, err := cl.EnqueueMany(ctx, jobs); err != nil {
		return fmt.Errorf("bench: pre-enqueue %s: %w", taskType, err)
	}
	return nil
}

// newWorker returns a jetflow worker on a fresh connection with the
// configured concurrency. stop shuts it down and closes the connection.
func (e *env) newWorker(opts ...framework.WorkerOption) (*framework.Worker, func() error, error) {
	nc, err := e.connect()
	if err != nil {
		return nil, nil, err
	}
	w, err := framework.NewWorker(nc, append([]framework.WorkerOption{framework.WithConcurrency(e.cfg.concurrency)}, opts...)...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	stop := func() error {
		defer nc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.Shutdown(ctx); err != nil && !errors.Is(err, framework.ErrWorkerClosed) {
			return fmt.Errorf("bench: worker shutdown: %w", err)
		}
		return nil
	}
	return w, stop, nil
}

// ensureWorkerConsumers creates the consumers a worker with the default
// handler options asks for taskType, one per priority (or one per priority
// of prios, those a worker with framework.WithServedPriorities serves), before a drain's
// timer starts: the raw drains create theirs before their timer too
// (drainRawWith), and Start inside the timed part then only looks them up.
// On a cluster, creating them is a round of the meta group each (about
// 90 ms for four at R3).
func (e *env) ensureWorkerConsumers(ctx context.Context, taskType string, prios ...streams.Priority) error {
	if len(prios) == 0 {
		prios = streams.Priorities[:]
	}
	for _, p := range prios {
		if _, err := topology.EnsureConsumer(ctx, e.js, e.names, topology.ConsumerSpec{TaskType: taskType, Priority: p}); err != nil {
			return err
		}
	}
	return nil
}

// watch reports on stderr every second in which done did not move, with the
// consumer's state, until the returned stop function is called. A drain that
// stalls (for example on tasks waiting out their ack wait) shows up here.
func (e *env) watch(done *atomic.Int64, consumer string) (stop func()) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		last := done.Load()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			now := done.Load()
			if now != last {
				last = now
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			c, err := e.js.Consumer(ctx, e.names.TaskStream(), consumer)
			cancel()
			if err != nil {
				e.progress("stalled at %d tasks; consumer %s: %v", now, consumer, err)
				continue
			}
			ci := c.CachedInfo()
			e.progress("stalled at %d tasks; consumer %s: pending %d, ack pending %d, redelivered %d, waiting pulls %d",
				now, consumer, ci.NumPending, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting)
		}
	})
	return func() { close(quit); wg.Wait() }
}
