// Command jetflow-testworker is a jetflow worker process for fault tests.
//
// It runs tasks of one type, announces each start on a core NATS subject
// (the payload is the task ID) and then holds the task until it is killed or
// the hold time passes. Fault tests build it, run it against an embedded
// server, and kill it with SIGKILL mid-task to check that its tasks run
// elsewhere once their ack wait passes.
//
// With -partitions N it runs ordered tasks instead ([framework.WithOrdering]
// with N partitions; payload {"key":…,"n":…}): it publishes a JSON record
// on the -record subject when each task starts and when its handler returns,
// holds each task for -hold, and holds the first attempt of the -block task
// ("key/n") until the process is killed. -lanes N does the same with N
// lanes ([framework.Ordering].Lanes) instead of partitions.
//
// Usage:
//
//	jetflow-testworker -url nats://127.0.0.1:4222 [-type fault.work] [-ack-wait 2s]
//	                   [-announce jetflow.test.started] [-hold 1h] [-concurrency 8]
//	                   [-partitions 4 | -lanes 4] [-record jetflow.test.ordered -block key/n]
//	                   [-id w1] [-registry-interval 5s]
//
// SIGINT and SIGTERM shut the worker down cleanly; SIGKILL is the point.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/jetflow-io/jetflow/framework"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "jetflow-testworker:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("jetflow-testworker", flag.ContinueOnError)
	url := fs.String("url", nats.DefaultURL, "NATS server URL(s), comma-separated")
	taskType := fs.String("type", "fault.work", "task type to run")
	ackWait := fs.Duration("ack-wait", 2*time.Second, "ack wait of the task type (must match the other workers)")
	announce := fs.String("announce", "jetflow.test.started", "core NATS subject announcing each task start")
	hold := fs.Duration("hold", time.Hour, "how long each task runs")
	concurrency := fs.Int("concurrency", 8, "tasks run at once")
	partitions := fs.Int("partitions", 0, "run ordered tasks with this many partitions (0: unordered)")
	lanes := fs.Int("lanes", 0, "run ordered tasks in this many lanes (0: unordered, or -partitions)")
	record := fs.String("record", "jetflow.test.ordered", "core NATS subject of the ordered tasks' start and end records")
	block := fs.String("block", "", "ordered task key/n whose first attempt is held until the process dies")
	id := fs.String("id", "", "worker ID in the worker registry (default: generated)")
	registryInterval := fs.Duration("registry-interval", framework.DefaultRegistryInterval, "how often the worker writes its registry record")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nc, err := nats.Connect(*url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer nc.Close()
	opts := []framework.WorkerOption{framework.WithLogger(log), framework.WithConcurrency(*concurrency),
		framework.WithShutdownTimeout(time.Second), framework.WithTimings(framework.Timings{RegistryInterval: *registryInterval})}
	if *id != "" {
		opts = append(opts, framework.WithWorkerID(*id))
	}
	w, err := framework.NewWorker(nc, opts...)
	if err != nil {
		return err
	}
	if *partitions > 0 || *lanes > 0 {
		err := handleOrdered(w, nc, *taskType, orderedConfig{partitions: *partitions, lanes: *lanes, record: *record,
			block: *block, hold: *hold, ackWait: *ackWait})
		if err != nil {
			return err
		}
		return w.Run(ctx)
	}
	w.HandleFunc(*taskType, func(ctx context.Context, t *framework.Task) error {
		if err := nc.Publish(*announce, []byte(t.ID)); err != nil {
			return err
		}
		if err := nc.Flush(); err != nil {
			return err
		}
		timer := time.NewTimer(*hold)
		defer timer.Stop()
		select {
		case <-timer.C:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}, framework.WithAckWait(*ackWait), framework.WithTypeConcurrency(*concurrency))
	return w.Run(ctx)
}
