package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/jetflow-io/jetflow/framework"
	"github.com/jetflow-io/jetflow/schedule"
	"github.com/jetflow-io/jetflow/streams"
)

// workers is the number of workers, one per node of the embedded cluster.
const workers = 3

// ensureWait bounds streams.Ensure.
const ensureWait = 30 * time.Second

// demo is one run: its servers, connections, workers and ledger.
type demo struct {
	cfg    config
	out    io.Writer
	start  time.Time
	srv    *servers
	js     jetstream.JetStream
	l      *ledger
	run    string
	logger *slog.Logger

	retries atomic.Int64 // ordered tasks failed once on purpose
	conns   []*nats.Conn
	workers []*framework.Worker
}

// say prints a line of the timeline.
func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "%+7.2fs  %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	level := slog.LevelError
	if cfg.verbose {
		level = slog.LevelInfo
	}
	d := &demo{cfg: cfg, out: &syncWriter{w: stdout}, start: time.Now(), l: newLedger(),
		run:    fmt.Sprintf("r%06x", time.Now().UnixNano()&0xffffff),
		logger: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))}
	runCtx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if d.srv, err = startServers(runCtx, cfg.url); err != nil {
		return err
	}
	defer d.srv.close()
	defer d.stopAll()
	d.say("%s", d.srv.describe())
	return d.execute(ctx, runCtx)
}

// stopAll shuts the workers down and closes the connections.
func (d *demo) stopAll() {
	sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, w := range d.workers {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Shutdown(sctx) }()
	}
	wg.Wait()
	d.workers = nil
	for _, nc := range d.conns {
		nc.Close()
	}
	d.conns = nil
}

// dial connects to node first (see servers.dial) and closes the connection
// with the others; a reconnect is printed.
func (d *demo) dial(name string, first int) (*nats.Conn, error) {
	nc, err := d.srv.dial(name, first, nats.ReconnectHandler(func(nc *nats.Conn) {
		d.say("%s reconnected to %s", name, nc.ConnectedServerName())
	}))
	if err != nil {
		return nil, fmt.Errorf("%s: connect: %w", name, err)
	}
	d.conns = append(d.conns, nc)
	return nc, nil
}

// startWorker starts worker i on node i with the three task types.
func (d *demo) startWorker(ctx context.Context, i int) error {
	name := fmt.Sprintf("worker-%d", i+1)
	nc, err := d.dial(name, i)
	if err != nil {
		return err
	}
	w, err := framework.NewWorker(nc, framework.WithConcurrency(32), framework.WithWorkerID(d.run+"-"+name),
		framework.WithLogger(d.logger.With("worker", name)))
	if err != nil {
		return err
	}
	// A task that loses its acknowledgement to the stopped server comes
	// back after the ack wait: keep it short.
	ackWait := framework.WithAckWait(5 * time.Second)
	framework.Handle(w, jobType, func(_ context.Context, t *framework.Task, j Job) error {
		if j.Run != d.run {
			return nil
		}
		if j.Due != 0 {
			d.l.late(time.Since(time.Unix(0, j.Due)))
		}
		d.l.done(t.ID, t.Stream, "", 0)
		return nil
	}, ackWait)
	framework.Handle(w, stepType, func(_ context.Context, t *framework.Task, s Step) error {
		if s.Run != d.run {
			return nil
		}
		d.l.start(t.ID, s.Key, s.Seq)
		if s.Seq%7 == 3 && d.l.failOnce(t.ID) {
			d.retries.Add(1)
			return framework.RetryAfterErr(20*time.Millisecond, errors.New("fails once on purpose"))
		}
		d.l.done(t.ID, t.Stream, s.Key, s.Seq)
		return nil
	}, ackWait, framework.WithOrdering(framework.Ordering{}))
	framework.Handle(w, tickType, func(ctx context.Context, t *framework.Task, tk Tick) error {
		if fire, ok := t.ScheduleFire(); ok && tk.Run == d.run {
			d.l.tick(framework.IdempotencyKey(ctx), fire.Time)
		}
		return nil
	}, ackWait)
	if err := w.Start(ctx); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	d.workers = append(d.workers, w)
	d.say("%s serves every partition, connected to %s", name, nc.ConnectedServerName())
	return nil
}

// execute runs the demo on the servers; runCtx bounds it (-timeout).
func (d *demo) execute(ctx, runCtx context.Context) error {
	cfg := d.cfg
	pnc, err := d.dial("producer", 1)
	if err != nil {
		return err
	}
	if d.js, err = jetstream.New(pnc); err != nil {
		return err
	}
	// Ensure takes seconds; bound it, so that a stall shows as its own
	// error and not as the run's timeout.
	ectx, cancel := context.WithTimeout(runCtx, ensureWait)
	_, err = streams.Ensure(ectx, d.js, streams.Config{Partitions: cfg.partitions, Replicas: cfg.replicas})
	cancel()
	if err != nil {
		return fmt.Errorf("ensure the topology: %w", err)
	}
	leaders, err := waitLeaders(runCtx, d.js, "\x00")
	if err != nil {
		return err
	}
	d.say("topology: %d task partitions, %d replicas each", len(leaders), cfg.replicas)
	for _, line := range leaderLines(leaders) {
		d.say("  %s", line)
	}
	for i := range workers {
		if err := d.startWorker(runCtx, i); err != nil {
			return err
		}
	}
	client, err := framework.NewClient(pnc)
	if err != nil {
		return err
	}
	tick := schedule.Definition{Name: "partitions-tick-" + d.run, Spec: "@every 1s", Type: tickType, Payload: Tick{Run: d.run}}
	if _, err := schedule.New(client).Register(runCtx, tick); err != nil {
		return err
	}
	d.say("schedule %s ticks every second into %s", tick.Name, tickType)

	items := plan(cfg, d.run)
	gate := make(chan struct{})
	p := &producer{client: client, run: d.run, l: d.l, items: items, rate: cfg.rate, gateAt: cfg.tasks / 2, gate: gate}
	pctx, stopProducer := context.WithCancel(runCtx)
	defer stopProducer()
	produced := make(chan error, 1)
	go func() { produced <- p.loop(pctx) }()
	d.say("enqueueing %d tasks at %d/s: %d immediate, %d delayed 200ms-2s, %d ordered over %d keys (producer on %s)",
		cfg.tasks, cfg.rate, cfg.tasks-cfg.tasks*3/10-cfg.tasks/5, cfg.tasks/5, cfg.tasks*3/10, cfg.keys, pnc.ConnectedServerName())

	killed, waitErr := d.await(runCtx, gate, produced)
	if waitErr != nil {
		stopProducer()
	}
	if err := <-produced; err != nil && waitErr == nil {
		waitErr = err
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := schedule.New(client).Remove(rctx, tick.Name); err != nil {
		d.say("remove the schedule %s: %v", tick.Name, err)
	}
	leaders, err = streams.Leaders(rctx, d.js, "")
	if err != nil {
		d.say("partition leaders: %v", err)
	}
	d.stopAll()
	return d.report(leaders, killed, p, waitErr)
}

// await drives the run: it stops a server once a third of the tasks ran,
// opens the gate, starts it again at two thirds, and returns once every
// acknowledged enqueue completed and the schedule ticked (after the stop
// too). It returns the stopped server's name ("none").
func (d *demo) await(ctx context.Context, gate chan struct{}, produced chan error) (killed string, err error) {
	killed = "none"
	victim, phase := -1, 0
	producing := true
	status := time.NewTicker(2 * time.Second)
	defer status.Stop()
	for {
		done := d.l.completed()
		switch {
		case phase == 0 && done >= d.cfg.tasks/3:
			phase = 1
			if victim, killed, err = d.kill(ctx, done); err != nil {
				return killed, err
			}
			close(gate)
		case phase == 1 && done >= 2*d.cfg.tasks/3:
			phase = 2
			if victim >= 0 {
				if err := d.srv.restart(victim); err != nil {
					return killed, err
				}
				d.say("restart: %s is back on its store, after %d of %d tasks ran", killed, done, d.cfg.tasks)
			}
		}
		if !producing && phase > 0 && d.l.missing() == 0 {
			all, after := d.l.cronTicks()
			if all > 0 && (victim < 0 || after > 0) {
				d.say("all %d tasks ran; the schedule ticked %d times, %d of them after the stop", d.cfg.tasks, all, after)
				return killed, nil
			}
		}
		select {
		case <-d.l.progress:
		case <-status.C:
			if n, which := d.l.missingOf(); !producing && n > 0 {
				d.say("waiting for %d tasks: %s", n, which)
			}
		case perr := <-produced:
			produced <- perr // for execute
			if perr != nil {
				return killed, perr
			}
			producing = false
			d.say("producer done: %d tasks stored", d.cfg.tasks)
			produced = nil
		case <-ctx.Done():
			return killed, fmt.Errorf("timed out after %v: %d of %d tasks ran", d.cfg.timeout, d.l.completed(), d.cfg.tasks)
		}
	}
}

// kill stops the server leading partition 1's stream (the last one's with
// fewer partitions) and waits until every partition has a leader again.
func (d *demo) kill(ctx context.Context, done int) (victim int, name string, err error) {
	if !d.srv.embedded() || d.cfg.noKill {
		why := "-no-kill"
		if !d.srv.embedded() {
			why = "-url: the servers are not this program's to stop"
		}
		d.say("no server stopped (%s), after %d of %d tasks ran", why, done, d.cfg.tasks)
		return -1, "none", nil
	}
	leaders, err := waitLeaders(ctx, d.js, "\x00")
	if err != nil {
		return -1, "none", err
	}
	target := leaders[min(1, len(leaders)-1)]
	victim = d.srv.node(target.Leader)
	if victim < 0 {
		return -1, "none", fmt.Errorf("leader %q of %s is not a node of the cluster", target.Leader, target.Stream)
	}
	at := time.Now()
	d.l.killed(at)
	d.srv.stop(victim)
	d.say("kill: stopped %s, leader of %s, after %d of %d tasks ran (%d stored)", target.Leader, target.Stream, done, d.cfg.tasks, d.l.stored())
	leaders, err = waitLeaders(ctx, d.js, target.Leader)
	if err != nil {
		return victim, target.Leader, err
	}
	d.say("failover: every partition has a leader again %v after the stop", time.Since(at).Round(time.Millisecond))
	for _, line := range leaderLines(leaders) {
		d.say("  %s", line)
	}
	return victim, target.Leader, nil
}

// report prints the verdict and the RESULT line and returns the error the
// program exits with.
func (d *demo) report(leaders []streams.PartitionLeader, killed string, p *producer, waitErr error) error {
	var names []string
	for _, line := range leaderLines(leaders) {
		d.say("  now: %s", line)
	}
	for _, l := range leaders {
		names = append(names, l.Stream)
	}
	base := streams.MustNames("")
	s := d.l.summarize(func(id string, k kind, stored string) string {
		if k == delayed { // stored in the delay stream; the client chose the partition by ID (as jetflow's client does)
			return base.Partition(streams.Layout{Partitions: len(names)}.TaskPartition(id)).TaskStream()
		}
		return stored
	})
	per := make([]string, len(names))
	for i, n := range names {
		per[i] = fmt.Sprint(s.perStream[n])
	}
	for _, v := range s.violations[:min(len(s.violations), 10)] {
		d.say("order violation: %s", v)
	}
	if s.lost > 0 {
		d.say("lost (first %d): %s", len(s.lostIDs), strings.Join(s.lostIDs, " "))
	}
	lost := s.lost + (d.cfg.tasks - s.enqueued) // tasks never stored count as lost when the run ends early
	fmt.Fprintf(d.out, "RESULT partitions tasks=%d partitions=%d per_partition=%s delayed=%d ordered=%d cron_ticks=%d killed=%s lost=%d order_violations=%d duplicates=%d misplaced=%d retries=%d enqueue_retries=%d delayed_max_late_ms=%d elapsed_ms=%d\n",
		s.enqueued, len(names), strings.Join(per, "/"), s.byKind[delayed], s.byKind[ordered], s.ticks, killed,
		lost, len(s.violations), s.duplicates, s.misplaced, d.retries.Load(), p.retried.Load(), s.maxLate.Milliseconds(),
		time.Since(d.start).Milliseconds())
	switch {
	case waitErr != nil:
		return waitErr
	case lost > 0 || len(s.violations) > 0 || s.misplaced > 0:
		return fmt.Errorf("%d tasks lost, %d order violations, %d tasks misplaced", lost, len(s.violations), s.misplaced)
	}
	return nil
}

// syncWriter serialises writes: reconnect handlers print from their own
// goroutines.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
