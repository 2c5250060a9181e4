// Command partitions shows task partitions riding out the loss of a
// server: tasks spread over three task streams (JETFLOW_TASKS,
// JETFLOW_TASKS_P1, JETFLOW_TASKS_P2), each led by a different server of a
// three-node cluster, and one of those servers stops in the middle of the
// run.
//
// It starts an embedded cluster of three nats-servers, ensures the
// topology with streams.Config{Partitions: 3, Replicas: 3} and prints the
// leader of each partition's stream. Three workers connect to a different
// node each (knowing the others, to fail over to) and serve every
// partition. A producer enqueues -tasks tasks at -rate per second, every
// one with its own ID: immediate tasks and tasks delayed by 200 ms to 2 s
// (framework.At), spread over the partitions by ID, and three tenths
// ordered tasks (framework.Ordered over -keys keys; a key's tasks live in
// one partition and carry their sequence number; one in seven fails once
// and is retried). A repeating schedule ("@every 1s") enqueues a tick
// every second.
//
// Once a third of the tasks ran, the server leading partition 1's stream
// is stopped (a graceful shutdown: it hands its leaderships over, as in a
// rolling restart); the producer keeps enqueueing, the worker and clients
// connected to it reconnect to the others, and once two thirds ran the
// server is started again on its store. The run ends when every
// acknowledged enqueue completed and the schedule ticked at least once
// after the stop. It checks that
//
//   - every task ran at least once (lost: IDs whose enqueue was
//     acknowledged that never completed);
//   - no task of a key started before its predecessor completed, nor ran
//     after a later task of its key completed (order_violations);
//   - each task ran in the partition its enqueue chose (misplaced), delayed
//     ones included;
//
// counts the runs beyond the first (duplicates: delivery is at least once,
// and a stopped server can cost an acknowledgement) and prints one line per
// phase, then
//
//	RESULT partitions tasks=N partitions=3 per_partition=a/b/c delayed=D ordered=O cron_ticks=T killed=jetflow-n2 lost=0 order_violations=0 duplicates=U misplaced=0 retries=R enqueue_retries=E delayed_max_late_ms=L elapsed_ms=M
//
// (per_partition: the tasks that ran in each partition's stream; retries:
// ordered tasks failed once on purpose; enqueue_retries: tasks sent again,
// with their ID, after an enqueue failed; delayed_max_late_ms: the latest
// start of a delayed task after its due time: one on its way to a delay
// mover when the server stopped can wait for the movers' ack wait, 30 s,
// before another mover takes it). It exits
// 1 when a task was lost or misplaced, a key ran out of order, the
// schedule never ticked after the stop, or -timeout passed.
//
// Usage:
//
//	go run ./examples/partitions [-tasks 3000] [-keys 100] [-rate 1500] [-no-kill] [-v] [-timeout 2m]
//	go run ./examples/partitions -url nats://a:4222,nats://b:4222,nats://c:4222 [-replicas 3] [-partitions 3]
//
// With -url it runs against existing servers (task IDs, keys and the
// schedule's name then carry a suffix of the run); it cannot stop one of
// them, so it skips the stop (killed=none), as -no-kill does.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jetflow-io/jetflow/streams"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "partitions:", err)
		}
		os.Exit(1)
	}
}

type config struct {
	url        string
	partitions int
	replicas   int
	tasks      int
	keys       int
	rate       int
	noKill     bool
	verbose    bool
	timeout    time.Duration
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("partitions", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.url, "url", "", "run against the NATS servers at this URL (comma-separated) instead of an embedded cluster; no server is stopped")
	fs.IntVar(&c.partitions, "partitions", 3, "task partitions (task streams)")
	fs.IntVar(&c.replicas, "replicas", 3, "replicas of every stream (at most 3 on the embedded cluster)")
	fs.IntVar(&c.tasks, "tasks", 3000, "tasks to enqueue: 3/10 ordered, 1/5 delayed, the rest immediate")
	fs.IntVar(&c.keys, "keys", 100, "ordering keys the ordered tasks are spread over")
	fs.IntVar(&c.rate, "rate", 1500, "tasks enqueued per second")
	fs.BoolVar(&c.noKill, "no-kill", false, "do not stop a server")
	fs.BoolVar(&c.verbose, "v", false, "log the workers at Info")
	fs.DurationVar(&c.timeout, "timeout", 2*time.Minute, "deadline for the whole run")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if c.partitions < 1 || c.partitions > streams.MaxPartitions {
		return c, fmt.Errorf("%w: %d: want 1 to %d", streams.ErrPartitions, c.partitions, streams.MaxPartitions)
	}
	if c.tasks < 30 || c.keys < 1 || c.keys > c.tasks*3/10 || c.rate < 1 || c.timeout <= 0 {
		return c, fmt.Errorf("want -tasks ≥ 30, 1 ≤ -keys ≤ 3/10 of -tasks, -rate ≥ 1, -timeout > 0")
	}
	if c.replicas < 1 || c.replicas > 5 || (c.url == "" && c.replicas > nodes) {
		return c, fmt.Errorf("-replicas %d: want 1 to 5, at most %d on the embedded cluster", c.replicas, nodes)
	}
	return c, nil
}
